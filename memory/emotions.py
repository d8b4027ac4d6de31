"""Emotion-and-cause records: reading the model's answer (memory/prompts/emotions.txt) and merging it into the
previous records. The call itself is a shared update step (memory/updaters/steps.py Steps.emotions), so every
strategy gets its records from the same extraction.

The rules are in code, whatever the model writes:
- a record's status changes only with the user's words from this session, quoted (the quote must be found in the
  user's turns of the session; a change without one is refused and reported);
- a new record needs such a quote too (an emotion the user did not voice is not recorded);
- records the answer does not mention stay as they were (a dropped line loses nothing); no usable answer keeps
  every previous record and says so;
- a record follows its sentence through rewrites (memory/store/emotions.py follow);
- a cause's date is an ISO date, resolved against the session's date (a relative one the model left is resolved
  here: "다음 주 화요일", "내일", "3일 뒤", "12월 8일").
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from datetime import date, timedelta

from memory.korean import content_words
from memory.store.emotions import EmotionRecord
from memory.text import strip_wrappers

PLAN = "계획"  # the label of a dated plan the user told without a feeling (a trip, an appointment): due like the rest


def is_plan(record: EmotionRecord) -> bool:
    """A plan recorded for its date, not a feeling: no emotion-and-cause mark on its sentence."""
    return record.emotion == PLAN


STATUS_WORDS = {
    "진행중": "ongoing",
    "진행": "ongoing",
    "지속": "ongoing",
    "ongoing": "ongoing",
    "해소": "resolved",
    "해결": "resolved",
    "resolved": "resolved",
    "지난일": "past",
    "과거": "past",
    "지난": "past",
    "past": "past",
}
STATUS_KOREAN = {"ongoing": "진행 중", "resolved": "해소", "past": "지난 일"}
MIN_QUOTE = 4  # characters (letters and digits) a quote needs to count as evidence
FUZZY = 0.6  # share of a quote's character pairs one user turn must hold, when the model reworded the quote
QUOTE_CHARS = 160

_NEW = re.compile(r"^(?:새|신규|new|\+)$", re.I)
_REF = re.compile(r"^R\s*(\d+)$", re.I)
_WORD = re.compile(r"[^\w]", re.U)


@dataclass(frozen=True)
class Line:
    """One parsed answer line: which record (an index into the shown records, or None: a new one) and its fields."""

    ref: int | None
    emotion: str
    cause: str
    status: str | None  # None: the status word was not one we know
    due: str
    sentence: int | None  # 1-based, in the shown memory
    quote: str


def parse_lines(answer: str, shown: int) -> list[Line]:
    """The record lines of an answer: 7 fields split by '|' (a preamble, headings, bullets, an unknown record number
    and a line cut short are skipped)."""
    lines = []
    for raw in strip_wrappers(answer).splitlines():
        fields = [f.strip().strip("*").strip() for f in raw.strip().strip("|").split("|")]
        if len(fields) < 7:
            continue
        head = re.sub(r"^[-*•·\d.)\s]+(?=[R새신n+])", "", fields[0], flags=re.I).strip()
        ref: int | None
        if _NEW.match(head):
            ref = None
        elif (m := _REF.match(head)) and 1 <= int(m.group(1)) <= shown:
            ref = int(m.group(1)) - 1
        else:
            continue  # a header row ("기록번호 | 감정 | ...") or a record number we did not show
        emotion, cause = fields[1], fields[2]
        if not emotion or not cause:
            continue
        word = _WORD.sub("", fields[3]).lower()  # "진행 중", "해소됨", "지난 일", "resolved" ...
        status = next(
            (v for k, v in sorted(STATUS_WORDS.items(), key=lambda kv: -len(kv[0])) if word.startswith(k)), None
        )
        number = re.sub(r"\D", "", fields[5])
        quote = "|".join(fields[6:]).strip().strip("\"'“”‘’「」『』").strip()
        lines.append(Line(ref, emotion, cause, status, fields[4], int(number) if number else None, quote))
    return lines


def _plain(text: str) -> str:
    return _WORD.sub("", text).replace("_", "").lower()


def _pairs(text: str) -> set[str]:
    return {text[i : i + 2] for i in range(len(text) - 1)}


def find_quote(quote: str, user_turns: list[str]) -> str | None:
    """The user's own words behind `quote`: the quote itself when a user turn holds it (spacing and punctuation
    aside), the user turn that holds most of it when the model reworded it slightly; None when the session's user
    turns do not say it."""
    plain = _plain(quote)
    if len(plain) < MIN_QUOTE:
        return None
    turns = [(t, _plain(t)) for t in user_turns]
    if any(plain in p for _, p in turns):
        return quote[:QUOTE_CHARS]
    want = _pairs(plain)
    best, share = None, 0.0
    for text, p in turns:
        got = len(want & _pairs(p)) / len(want)
        if got > share:
            best, share = text, got
    return best.strip()[:QUOTE_CHARS] if best is not None and share >= FUZZY else None


_WEEKDAYS = "월화수목금토일"
_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_MONTH_DAY = re.compile(r"(?:(\d{4})년\s*)?(\d{1,2})월\s*(\d{1,2})일")
_IN_DAYS = re.compile(r"(\d+)\s*일\s*(?:뒤|후)")
_IN_WEEKS = re.compile(r"(\d+)\s*주\s*(?:뒤|후)")
_WEEKDAY = re.compile(r"(다다음\s*주|다음\s*주|이번\s*주|담주|저번\s*주|지난\s*주)?\s*([월화수목금토일])요일")


def resolve_date(text: str, today: date) -> date | None:
    """A cause's date from what the model wrote: an ISO date, or a Korean date or relative expression resolved
    against the session's date `today`; None when it names no day ("-", "없음", "언젠가")."""
    text = text.strip()
    if m := _ISO.search(text):
        try:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            return None
    if m := _MONTH_DAY.search(text):
        year = int(m.group(1)) if m.group(1) else today.year
        try:
            day = date(year, int(m.group(2)), int(m.group(3)))
        except ValueError:
            return None
        return day if m.group(1) or day >= today - timedelta(days=31) else date(year + 1, day.month, day.day)
    for word, days in (("모레", 2), ("내일", 1), ("오늘", 0), ("어제", -1), ("그제", -2)):
        if word in text:
            return today + timedelta(days=days)
    if m := _IN_DAYS.search(text):
        return today + timedelta(days=int(m.group(1)))
    if m := _IN_WEEKS.search(text):
        return today + timedelta(weeks=int(m.group(1)))
    if m := _WEEKDAY.search(text):
        week = re.sub(r"\s", "", m.group(1) or "")
        shift = {"다다음주": 2, "다음주": 1, "담주": 1, "이번주": 0, "저번주": -1, "지난주": -1}.get(week)
        monday = today - timedelta(days=today.weekday())
        target = _WEEKDAYS.index(m.group(2))
        if shift is None:  # a bare weekday: the next one to come (today counts)
            return today + timedelta(days=(target - today.weekday()) % 7)
        return monday + timedelta(weeks=shift, days=target)
    if "다음 주" in text or "다음주" in text:
        return today + timedelta(weeks=1)
    return None


def newest_first(records: list[EmotionRecord]) -> list[EmotionRecord]:
    """The timeline's order (the memory tab, `keem memory emotions`): started most recently first; among those, the
    most recently spoken of."""
    return sorted(records, key=lambda r: (r.first_seen, r.last_seen), reverse=True)


def shown_records(records: list[EmotionRecord]) -> list[int]:
    """Indices of the records the model sees and may change: the ongoing ones (a resolved or past record is
    history; one that comes back is a new record)."""
    return [i for i, r in enumerate(records) if r.status == "ongoing"]


def _sentence_for(line: Line, memory: list[str], fallback: str) -> str:
    """The memory sentence a line names (1-based, in range), else the one sharing most content words with its
    emotion and cause, else `fallback`."""
    if line.sentence is not None and 1 <= line.sentence <= len(memory):
        return memory[line.sentence - 1]
    if fallback:
        return fallback
    words = content_words(f"{line.emotion} {line.cause}")
    scored = [(len(words & content_words(t)), -i) for i, t in enumerate(memory)]
    best = max(scored, default=(0, 0))
    return memory[-best[1]] if best[0] else ""


def merge(
    records: list[EmotionRecord],
    answer: str | None,
    memory: list[str],
    dialogue: list[dict[str, str]],
    session_date: date,
    session_id: int | None,
) -> tuple[list[EmotionRecord], dict[str, object]]:
    """The new records: `records` (already following the new memory) changed by the answer's lines, under the
    module's rules; and a report of what changed and what was refused (stored in the version's details)."""
    today = session_date.isoformat()
    if answer is None:
        return records, {"failed": True, "note": "no usable answer: kept the previous emotion records"}
    user_turns = [t["text"] for t in dialogue if t["role"] == "user"]
    shown = shown_records(records)
    out = list(records)
    report: dict[str, list[str]] = {"new": [], "changed": [], "seen": [], "refused": []}
    for line in parse_lines(answer, len(shown)):
        quote = find_quote(line.quote, user_turns)
        due = resolve_date(line.due, session_date)
        if line.ref is None:  # a new record, unless it repeats an ongoing one
            same = next(  # a repeated line, or an ongoing record written as new
                (
                    i
                    for i, r in enumerate(out)
                    if r.status == "ongoing" and r.cause == line.cause and r.emotion == line.emotion
                ),
                None,
            )
            if same is None:
                if quote is None:
                    report["refused"].append(f"new {line.emotion}/{line.cause}: no quote from this session")
                    continue
                status = line.status or "ongoing"
                out.append(
                    EmotionRecord(
                        key=uuid.uuid4().hex[:12],
                        emotion=line.emotion[:40],
                        cause=line.cause[:120],
                        status=status,
                        sentence=_sentence_for(line, memory, ""),
                        quote=quote,
                        first_seen=today,
                        last_seen=today,
                        first_session=session_id,
                        last_session=session_id,
                        due=due.isoformat() if due else None,
                        ended=quote if status != "ongoing" else None,
                        ended_at=today if status != "ongoing" else None,
                    )
                )
                report["new"].append(f"{line.emotion}/{line.cause}: {status}")
                continue
            index = same
        else:
            index = shown[line.ref]
        old = out[index]
        changed = replace(old, sentence=_sentence_for(line, memory, old.sentence))
        if old.due is None and due is not None:
            changed = replace(changed, due=due.isoformat())
        if quote is not None:
            changed = replace(changed, last_seen=today, last_session=session_id)
        status = line.status or old.status
        if status != old.status:
            if quote is None:
                report["refused"].append(f"{old.emotion}/{old.cause}: {old.status} -> {status} without a quote")
            else:
                ended = (quote, today) if status != "ongoing" else (None, None)  # back to ongoing: it came back
                changed = replace(changed, status=status, ended=ended[0], ended_at=ended[1])
                report["changed"].append(f"{old.emotion}/{old.cause}: {old.status} -> {status}")
        elif quote is not None:
            report["seen"].append(f"{old.emotion}/{old.cause}")
        out[index] = changed
    return out, {k: v for k, v in report.items() if v}
