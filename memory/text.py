"""Text helpers of memory updates: dates, dialogues as prompt text, and reading what models answer.

Models wrap their answers: a <think> block, a preamble line, code fences, numbering, bullets, an English line,
a repeated line. `strip_wrappers` removes what is never content; the parsers keep only what the prompt asked for.
"""

from __future__ import annotations

import re
from datetime import date, datetime

MAX_SENTENCE_CHARS = 300
UNKNOWN = "알 수 없음"


def to_date(value: str | date | datetime | None) -> date | None:
    """A date from an ISO string, a date or a datetime; None stays None."""
    if value is None or (isinstance(value, date) and not isinstance(value, datetime)):
        return value
    if isinstance(value, datetime):
        return value.date()
    return datetime.fromisoformat(value).date()


def lenient_date(value: str | None) -> date | None:
    """A corpus's session date, or None where it has none or one that is not ISO."""
    try:
        return to_date(value)
    except ValueError:
        return None


def elapsed_text(previous: date | None, current: date) -> str:
    """Korean duration between two sessions ("3일", "2주", "4개월", "1년")."""
    if previous is None:
        return "첫 대화"
    days = (current - previous).days
    if days <= 0:
        return "같은 날"
    if days < 14:
        return f"{days}일"
    if days < 60:
        return f"{days // 7}주"
    if days < 365:
        return f"{days // 30}개월"
    return f"{days // 365}년"


def format_dialogue(dialogue: list[dict[str, str]]) -> str:
    return "\n".join(f"{'사용자' if t['role'] == 'user' else '상대'}: {t['text']}" for t in dialogue)


_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_FENCE = re.compile(r"^\s*```")


def strip_wrappers(text: str) -> str:
    """The answer without reasoning blocks (<think>...</think>, an unclosed one to the end), fence lines or
    broken characters."""
    text = _THINK.sub("", text.replace("\ufffd", ""))
    return "\n".join(line for line in text.splitlines() if not _FENCE.match(line))


_BULLET = re.compile(r"^\s*(?:[-*•·]|\d+[.)]|[(（]\d+[)）])\s*")
_HEADING = re.compile(r"^(?:예시\s*)?(?:요약|답|새 기억|이전 기억|기억|summary|memory|answer)\s*[:：]", re.I)


def parse_sentences(text: str, limit: int = 60) -> list[str]:
    """Memory sentences from model output, one per line: wrappers, bullets, numbering, headings and duplicates
    removed.

    Only lines about the user ("사용자는 ...", as every prompt asks) of at most MAX_SENTENCE_CHARS are kept;
    anything else (chatter, echoes, an English line) is garbage.
    """
    out: list[str] = []
    for raw in strip_wrappers(text).splitlines():
        line = _HEADING.sub("", _BULLET.sub("", raw)).strip().strip('"“”*')
        if not line.startswith("사용자") or len(line) > MAX_SENTENCE_CHARS:
            continue
        if line not in out:
            out.append(line)
        if len(out) >= limit:
            break
    return out


_HANGUL = re.compile(r"[\uac00-\ud7a3]")


def lenient_sentences(text: str, limit: int = 60) -> list[str]:
    """Memory sentences: "사용자는 ..." lines when there are any, else every content line (corpora whose memories
    are written otherwise: CareCall's "손녀가 태어남", MSC's English). In an answer with Korean lines, a line with
    no Hangul is a model drifting into English, not memory."""
    strict = parse_sentences(text, limit)
    if strict:
        return strict
    out: list[str] = []
    for line in strip_wrappers(text).splitlines():
        line = _BULLET.sub("", line).strip().strip('"“”*')
        if line and len(line) <= MAX_SENTENCE_CHARS and not line.endswith((":", "：")) and line not in out:
            out.append(line)
    if any(_HANGUL.search(line) for line in out):
        out = [line for line in out if _HANGUL.search(line)]
    return out[:limit]


_FAILED = re.compile(r"실패|불통과|통과하지\s*못|통과\s*못|\bfail", re.I)
_PASSED = re.compile(r"통과|\bpass", re.I)


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """(True, "") for a pass, (False, the reason) for a failure, (None, the answer) when it says neither.

    Verdicts come in free text ("검토해 보니 문제가 없습니다. 통과"); any sign of failure wins over a pass.
    """
    answer = " ".join(strip_wrappers(text).split())
    failed = _FAILED.search(answer)
    if failed:
        return False, answer[failed.start() :][:200]
    if _PASSED.search(answer):
        return True, ""
    return None, answer[:80]


_YES = re.compile(r"^(?:예|네)(?![가-힣])|^yes\b", re.I)
_NO = re.compile(r"^아니(?:오|요)?(?![가-힣])|^no\b", re.I)


def parse_yes_no(text: str) -> bool | None:
    """The guard judge's 예/아니오 (preamble lines and reasoning blocks skipped); None when it says neither.

    Whole words only: "Note: ..." is no "no", "예시" no "예"."""
    for line in strip_wrappers(text).splitlines():
        line = line.strip().strip("\"'*.")
        if not line or line.endswith((":", "：")):
            continue
        if _NO.match(line):
            return False
        if _YES.match(line):
            return True
    return None


_NUMBERED = re.compile(r"^\s*[-*•]?\s*(\d{1,2})\s*[.:)：]\s*(.*)$")


def parse_yes_no_list(text: str, count: int) -> list[bool | None]:
    """The guard judge's answers to `count` numbered questions ("2: 예"), None where a number has no usable answer.

    A list numbered again by the model ("1. 1: 예") is read through; one question may be answered bare ("예")."""
    found: dict[int, bool | None] = {}
    for line in strip_wrappers(text).splitlines():
        m = _NUMBERED.match(line)
        while m and (inner := _NUMBERED.match(m.group(2))):  # "1. 1: 예"
            m = inner
        if m and 1 <= int(m.group(1)) <= count and int(m.group(1)) - 1 not in found:
            found[int(m.group(1)) - 1] = parse_yes_no(m.group(2))
    if not found and count == 1:
        return [parse_yes_no(text)]
    return [found.get(i) for i in range(count)]


_NUMBERS_LINE = re.compile(r"번호\s*[:：]\s*(.*)$")
_NONE = re.compile(r"없음|없습니다|none", re.I)


def parse_numbers(text: str, count: int) -> list[int] | None:
    """The 0-based indices a "번호: 3, 17" answer names (1..count; others ignored), [] for "번호: 없음", None when no
    line of the answer (wrappers aside) is such a line or a bare list of numbers."""
    found: list[str] | None = None
    for line in strip_wrappers(text).splitlines():
        m = _NUMBERS_LINE.search(line)
        bare = _BULLET.sub("", line).strip() if re.fullmatch(r"[\d,\s]+", _BULLET.sub("", line).strip()) else ""
        if m or bare:
            found = [(m.group(1) if m else bare)]
    if found is None:
        return None
    if _NONE.search(found[0]) and not re.search(r"\d", found[0]):
        return []
    numbers = [int(n) - 1 for n in re.findall(r"\d+", found[0])]
    return sorted({n for n in numbers if 0 <= n < count})


def extractive_summary(dialogue: list[dict[str, str]]) -> list[str]:
    """The user's own words as memory sentences: the summary of last resort when the model gives none."""
    return [
        f'사용자는 "{t["text"]}"라고 말했다.'
        for t in dialogue
        if t["role"] == "user" and len(t["text"]) <= MAX_SENTENCE_CHARS - 20
    ]
