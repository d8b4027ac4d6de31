"""A user trial's study plan (KEEM_STUDY / --study, a TOML file) and the rules the app enforces with it.

    id = "keem-pilot-2026"                 # letters, digits, . _ - (stored with consents and answers)
    title = "기억하는 챗봇 사용자 연구"
    strategies = ["keem", "accumulate"]    # compared: any of keem, accumulate, operations (default: all three)
    sessions = 5                           # sessions per participant
    min_gap_hours = 20                     # from the last message of one session to the start of the next
    opening = "follow-up"                  # optional: off | follow-up (default: the app's KEEM_OPENING)
    api = false                            # optional: participants may get HTTP API tokens (keem token create)
    consent = \"\"\"연구 참여 동의서 ...\"\"\"

    [[questions]]                          # optional; without any, DEFAULT_QUESTIONS
    id = "remembered"
    text = "챗봇이 지난 대화를 기억했다"     # kind = "likert" (default), scale = [1, 5], labels = [...]
    [[questions]]
    id = "comment"
    kind = "text"                          # free text: max_chars (1000), required = false by default
    text = "더 하고 싶은 말이 있다면 적어 주세요"

Errors name the field and the fix (InputError, one line). Without a study file nothing here is called. What a
participant reads (refusals, questionnaire errors) is Korean and never names the strategy; the errors of records.py
(a questionnaire answered twice, or empty) carry a code the page shows in Korean (chatbot/web/render.py).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from chatbot.localtime import LocalTime
from chatbot.settings import OPENINGS, Settings
from chatbot.study_records import records
from memory.store import Store
from memory.updaters import STRATEGIES
from models.errors import InputError

ALL_DONE = datetime.max.replace(tzinfo=timezone.utc)  # next_allowed: every session of the study is done
LIKERT_LABELS = ("전혀 그렇지 않다", "그렇지 않다", "보통이다", "그렇다", "매우 그렇다")
STUDY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ITEM_ID = re.compile(r"[a-z][a-z0-9_]{0,31}")
FIELDS = ("id", "title", "strategies", "sessions", "min_gap_hours", "consent", "questions", "opening", "api")
QUESTION_FIELDS = ("id", "text", "kind", "scale", "labels", "max_chars", "required")
MAX_TEXT_CHARS = 5000


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    kind: str = "likert"  # likert | text
    low: int = 1
    high: int = 5
    labels: tuple[str, ...] = LIKERT_LABELS
    max_chars: int = 1000
    required: bool = True


DEFAULT_QUESTIONS = (
    Question("remembered", "챗봇이 지난 대화를 기억했다"),
    Question("understood", "내 감정을 이해했다"),
    Question("natural", "대화가 자연스러웠다"),
    Question("again", "다시 대화하고 싶다"),
    Question("comment", "이번 대화에 대해 더 하고 싶은 말이 있다면 적어 주세요", kind="text", required=False),
)


@dataclass(frozen=True)
class Study:
    id: str
    title: str
    strategies: tuple[str, ...]
    sessions: int
    min_gap: timedelta
    consent: str
    questions: tuple[Question, ...] = DEFAULT_QUESTIONS
    opening: str | None = None  # off | follow-up for every participant's sessions; None: KEEM_OPENING decides
    api: bool = False  # participants may get HTTP API tokens; their API sessions keep the study's rules (chatbot/api)
    clock: Callable[[], datetime] = field(default=utc_now, compare=False, repr=False)  # tests move time on

    def admit(self, store: Store, user_id: int, session_id: int, local: LocalTime) -> None:
        """The rule for a session's first user message, which makes it count: called inside the write transaction
        that stores that message (chatbot/session.py ChatSession.gate), so tabs and processes take their turns
        and none gets past it. Refuses (InputError, Korean, with a code) when every session of the study is held,
        when another of the participant's counted sessions is still open, or before the gap has passed."""
        done = [s for s in trial_sessions(store, user_id) if s["id"] != session_id]
        if len(done) < self.sessions and any(s["status"] == "open" for s in done):
            raise InputError(
                "다른 창에서 하고 있는 대화가 있습니다. 그 대화를 끝낸 뒤 여기서 이야기해 주세요.",
                code="study_open_elsewhere",
            )
        when = next_allowed(store, user_id, self)
        if when is not None:
            raise refusal(when, local)

    @property
    def consent_hash(self) -> str:
        """What a consent record stores: the consent text's SHA-256 (a changed text needs a new consent)."""
        return hashlib.sha256(unicodedata.normalize("NFC", self.consent.strip()).encode("utf-8")).hexdigest()

    def check_answers(self, answers: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every answer checked against its question, before anything is stored: rows of item, kind, question
        and value (int rating, or stripped text). Raises InputError (Korean) at the first bad or missing one."""
        known = {q.id for q in self.questions}
        unknown = sorted(set(answers) - known)
        if unknown:
            raise InputError(
                f"이 설문에 없는 문항입니다: {', '.join(map(str, unknown))}",
                code="questionnaire_unknown",
                items=unknown,
            )
        rows = []
        for q in self.questions:
            value = answers.get(q.id)
            if isinstance(value, str):
                value = "".join(ch for ch in value if ch in "\n\t" or unicodedata.category(ch)[0] != "C").strip()
            if value is None or value == "":
                if q.required:
                    raise InputError(
                        f"'{q.text}' 문항에 답해 주세요.", code="questionnaire_missing", item=q.id, question=q.text
                    )
                continue
            rows.append(
                {
                    "item": q.id,
                    "kind": q.kind,
                    "question": q.text,
                    "value": _rating(q, value) if q.kind == "likert" else _free_text(q, value),
                }
            )
        return rows


def _rating(q: Question, value: Any) -> int:
    if isinstance(value, str) and value in q.labels:
        return q.low + q.labels.index(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not q.low <= value <= q.high:
        raise InputError(
            f"'{q.text}' 문항의 답은 {q.low}에서 {q.high} 사이의 하나여야 합니다.",
            code="questionnaire_range",
            item=q.id,
            question=q.text,
            low=q.low,
            high=q.high,
        )
    return value


def _free_text(q: Question, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(
            f"'{q.text}' 문항에는 글로 답해 주세요.", code="questionnaire_text", item=q.id, question=q.text
        )
    if len(value) > q.max_chars:
        raise InputError(
            f"'{q.text}' 답이 너무 깁니다 ({len(value):,}자, 최대 {q.max_chars:,}자). 줄여 주세요.",
            code="questionnaire_too_long",
            item=q.id,
            question=q.text,
            length=len(value),
            limit=q.max_chars,
        )
    return value


# -- loading and checking the file ------------------------------------------------------------------
def load_study(path: str | Path) -> Study:
    """Read and check a study plan; every problem is an InputError naming the field and the fix."""
    path = Path(path)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise InputError(
            "study plans are TOML files, read with Python 3.11's tomllib; run keem on Python 3.11+"
        ) from None
    if not path.is_file():
        raise InputError(f"study plan {path} not found; check KEEM_STUDY / --study (a TOML file)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; save the study plan as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML ({exc}); fix the syntax there") from None
    return study_from_dict(data, str(path))


def study_from_dict(data: Mapping[str, Any], where: str = "study plan") -> Study:
    unknown = [k for k in data if k not in FIELDS]
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}'; the fields are {', '.join(FIELDS)}")
    study_id = _field(data, "id", str, where, 'e.g. id = "keem-pilot-2026"')
    if not STUDY_ID.fullmatch(study_id):
        raise InputError(
            f"{where}: field 'id' = {study_id!r} must be 1-64 letters, digits, . _ - (e.g. id = \"keem-pilot-2026\")"
        )
    title = _field(data, "title", str, where, 'e.g. title = "기억하는 챗봇 사용자 연구"').strip()
    strategies = data.get("strategies", list(STRATEGIES))
    if (
        not isinstance(strategies, list)
        or not strategies
        or len(set(strategies)) != len(strategies)
        or not all(s in STRATEGIES for s in strategies)
    ):
        raise InputError(
            f"{where}: field 'strategies' = {strategies!r} must list different strategies among "
            f'{", ".join(STRATEGIES)} (e.g. strategies = ["keem", "accumulate"])'
        )
    sessions = _field(data, "sessions", int, where, "e.g. sessions = 5")
    if not 1 <= sessions <= 100:
        raise InputError(f"{where}: field 'sessions' = {sessions} must be from 1 to 100 (e.g. sessions = 5)")
    gap = data.get("min_gap_hours", 0)
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap <= 24 * 365:
        raise InputError(
            f"{where}: field 'min_gap_hours' = {gap!r} must be a number of hours from 0 to 8760 "
            "(e.g. min_gap_hours = 20)"
        )
    consent = _field(data, "consent", str, where, 'the consent text, e.g. consent = """연구 참여 동의서 ..."""')
    if len(consent) > 20_000:
        raise InputError(f"{where}: field 'consent' is {len(consent):,} characters; keep it under 20,000")
    raw = data.get("questions")
    questions = DEFAULT_QUESTIONS if raw is None else _questions(raw, where)
    opening = data.get("opening")
    if opening is not None and opening not in OPENINGS:
        raise InputError(
            f"{where}: field 'opening' = {opening!r} must be one of {', '.join(OPENINGS)} (e.g. opening = \"off\")"
        )
    api = data.get("api", False)
    if not isinstance(api, bool):
        raise InputError(f"{where}: field 'api' = {api!r} must be true or false (e.g. api = true)")
    return Study(
        study_id, title, tuple(strategies), sessions, timedelta(hours=gap), consent.strip(), questions, opening, api
    )


def _field(data: Mapping[str, Any], name: str, kind: type, where: str, example: str) -> Any:
    value = data.get(name)
    if value is None:
        raise InputError(f"{where}: field '{name}' is missing; add it ({example})")
    if isinstance(value, bool) or not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        what = "a whole number" if kind is int else "a non-empty string"
        raise InputError(f"{where}: field '{name}' = {value!r} must be {what} ({example})")
    return value


def _questions(raw: Any, where: str) -> tuple[Question, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(q, dict) for q in raw):
        raise InputError(
            f"{where}: field 'questions' must be one or more [[questions]] tables with id and text "
            "(or leave it out for the default questionnaire)"
        )
    out: list[Question] = []
    for n, q in enumerate(raw, 1):
        at = f"{where}: questions[{n}]"
        unknown = [k for k in q if k not in QUESTION_FIELDS]
        if unknown:
            raise InputError(f"{at}: unknown field '{unknown[0]}'; a question has {', '.join(QUESTION_FIELDS)}")
        item = _field(q, "id", str, at, 'e.g. id = "remembered"')
        if not ITEM_ID.fullmatch(item) or item in {o.id for o in out}:
            raise InputError(
                f"{at}: field 'id' = {item!r} must be unique, lower-case letters, digits and _ "
                '(e.g. id = "remembered")'
            )
        text = _field(q, "text", str, at, 'e.g. text = "챗봇이 지난 대화를 기억했다"').strip()
        kind = q.get("kind", "likert")
        if kind not in ("likert", "text"):
            raise InputError(f'{at}: field \'kind\' = {kind!r} must be "likert" (a rating) or "text" (free text)')
        required = q.get("required", kind == "likert")
        if not isinstance(required, bool):
            raise InputError(f"{at}: field 'required' = {required!r} must be true or false")
        if kind == "text":
            if "scale" in q or "labels" in q:
                raise InputError(
                    f"{at}: a text question has no 'scale' or 'labels'; remove them or set kind = \"likert\""
                )
            max_chars = q.get("max_chars", 1000)
            if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 1 <= max_chars <= MAX_TEXT_CHARS:
                raise InputError(
                    f"{at}: field 'max_chars' = {max_chars!r} must be a whole number from 1 to "
                    f"{MAX_TEXT_CHARS} (e.g. max_chars = 1000)"
                )
            out.append(Question(item, text, "text", max_chars=max_chars, required=required, labels=()))
            continue
        if "max_chars" in q:
            raise InputError(f"{at}: a rating question has no 'max_chars'; remove it or set kind = \"text\"")
        scale = q.get("scale", [1, 5])
        if (
            not isinstance(scale, list)
            or len(scale) != 2
            or not all(type(v) is int for v in scale)
            or not 0 <= scale[0] < scale[1] <= scale[0] + 10
        ):
            raise InputError(
                f"{at}: field 'scale' = {scale!r} must be [lowest, highest], whole numbers, 2-11 "
                "points (e.g. scale = [1, 5])"
            )
        low, high = scale
        default = LIKERT_LABELS if (low, high) == (1, 5) else tuple(str(v) for v in range(low, high + 1))
        labels = q.get("labels", list(default))
        if (
            not isinstance(labels, list)
            or len(labels) != high - low + 1
            or not all(isinstance(x, str) and x.strip() for x in labels)
            or len(set(labels)) != len(labels)
        ):
            raise InputError(
                f"{at}: field 'labels' must be {high - low + 1} different texts, one per point of "
                f"the scale {low}-{high}"
            )
        out.append(Question(item, text, "likert", low, high, tuple(x.strip() for x in labels), required=required))
    return tuple(out)


def study_from_settings(settings: Settings) -> Study | None:
    """The study the app runs (settings.study, KEEM_STUDY), checked at start; None without one."""
    return load_study(settings.study) if settings.study else None


# -- the rules during a trial ---------------------------------------------------------------------------
def assign_strategy(store: Store, user_id: int, study: Study) -> str:
    """The participant's strategy among the study's: kept from their first session, balanced across participants.
    Internal: never show it to the participant."""
    return store.users.assign_strategy(user_id, study.strategies)


def trial_sessions(store: Store, user_id: int) -> list[dict[str, Any]]:
    """The participant's sessions in which they said something, oldest first, each with its `number` (1, 2, ...)
    and `last_at` (the time of its last message)."""
    out: list[dict[str, Any]] = []
    for s in store.sessions.of_user(user_id):
        turns = store.turns.of_session(s["id"])
        if any(t["role"] == "user" for t in turns):
            out.append({**s, "number": len(out) + 1, "last_at": max(t["created_at"] for t in turns)})
    return out


def session_number(store: Store, user_id: int, session_id: int) -> int | None:
    """Which of the participant's sessions this one is (1-based), or None if they said nothing in it."""
    return next((s["number"] for s in trial_sessions(store, user_id) if s["id"] == session_id), None)


def next_allowed(store: Store, user_id: int, study: Study, now: datetime | None = None) -> datetime | None:
    """None when the participant may start a session now; otherwise the (UTC) time from which they may, or
    ALL_DONE once they held every session of the study. Call it before opening a session: the gap runs from the
    last message of their previous session (however it ended) for `study.min_gap`."""
    done = trial_sessions(store, user_id)
    if len(done) >= study.sessions:
        return ALL_DONE
    if not done:
        return None
    when = _utc(datetime.fromisoformat(done[-1]["last_at"])) + study.min_gap
    return when if when > _utc(now or study.clock()) else None


def refusal_message(when: datetime, local: LocalTime) -> str:
    """What a participant refused by next_allowed reads (Korean; rounded up to the minute, in `local`'s zone,
    KEEM_TIMEZONE's, named)."""
    if when >= ALL_DONE:
        return "이 연구의 대화를 모두 마치셨습니다. 참여해 주셔서 감사합니다."
    return f"다음 대화는 {local.minute(when, round_up=True)} ({local.korean}) 이후에 할 수 있습니다."


def refusal(when: datetime, local: LocalTime) -> InputError:
    """The error a session refused by next_allowed raises: refusal_message's text, with its code for the page."""
    if when >= ALL_DONE:
        return InputError(refusal_message(when, local), code="study_done")
    return InputError(
        refusal_message(when, local), code="study_wait", when=local.minute(when, round_up=True), zone=local.korean
    )


def has_consented(store: Store, user_id: int, study: Study) -> bool:
    """True when the participant agreed to this study's current consent text."""
    row = records(store).consent(user_id, study.id)
    return row is not None and row["text_hash"] == study.consent_hash


def give_consent(store: Store, user_id: int, study: Study, at: datetime | None = None) -> dict[str, Any]:
    return records(store).record_consent(user_id, study.id, study.consent_hash, at)


def submit_answers(store: Store, session_id: int, user_id: int, study: Study, answers: Mapping[str, Any]) -> int:
    """Check every answer against the study, then store them all (or, on any problem, nothing)."""
    return records(store).save_answers(session_id, user_id, study.id, dict(answers), check=study.check_answers)


def pending_questionnaires(store: Store, user_id: int, study: Study) -> list[dict[str, Any]]:
    """The participant's ended sessions of this study still without a questionnaire (offer them later), oldest
    first, each with its session `number`."""
    numbers = {s["id"]: s["number"] for s in trial_sessions(store, user_id)}
    return [
        {**s, "number": numbers[s["id"]]}
        for s in records(store).unanswered_sessions(user_id, study.id)
        if numbers.get(s["id"], study.sessions + 1) <= study.sessions
    ]


def _utc(when: datetime) -> datetime:
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
