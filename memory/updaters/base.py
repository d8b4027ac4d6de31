"""The interface every memory-update strategy implements, and the text helpers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Callable, Protocol

from memory.store import Sentence
from models.base import ChatModel, GenerationOptions, Message

Progress = Callable[[str], None]
MAX_SENTENCE_CHARS = 300


@dataclass(frozen=True)
class UpdateInput:
    """What a strategy sees: the previous memory, this session's dialogue, and when things happened."""

    previous: list[Sentence]
    dialogue: list[dict[str, str]]          # [{"role": "user"|"assistant", "text": ...}]
    session_date: date
    previous_date: date | None = None


@dataclass
class UpdateResult:
    sentences: list[Sentence]
    status: str                              # ok | fallback
    model_spec: str | None = None
    prompt_hash: str | None = None
    note: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Updater(Protocol):
    name: str

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult: ...


def to_date(value: str | date | datetime | None) -> date | None:
    if value is None or isinstance(value, date) and not isinstance(value, datetime):
        return value  # type: ignore[return-value]
    if isinstance(value, datetime):
        return value.date()
    return datetime.fromisoformat(value).date()


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


_BULLET = re.compile(r"^\s*(?:[-*•·]|\d+[.)]|[(（]\d+[)）])\s*")
_HEADING = re.compile(r"^(?:예시\s*)?(?:요약|답|새 기억|이전 기억|기억|summary|memory|answer)\s*[:：]", re.I)


def parse_sentences(text: str, limit: int = 60) -> list[str]:
    """Memory sentences from model output, one per line: bullets, numbering, headings and duplicates removed.

    Only lines about the user ("사용자는 ...", as every prompt asks) of at most MAX_SENTENCE_CHARS are kept;
    anything else (chatter, echoes, a line cut mid-character) is garbage.
    """
    out: list[str] = []
    for raw in text.replace("\ufffd", "").splitlines():
        line = _HEADING.sub("", _BULLET.sub("", raw)).strip().strip('"“”')
        if not line.startswith("사용자") or len(line) > MAX_SENTENCE_CHARS:
            continue
        if line not in out:
            out.append(line)
        if len(out) >= limit:
            break
    return out


def ask(model: ChatModel, system: str, prompt: str, max_new_tokens: int) -> str:
    """One deterministic call (temperature 0, top-p 1) as memory updates need."""
    messages: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    return model.complete(messages, GenerationOptions(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0))


def extractive_summary(dialogue: list[dict[str, str]]) -> list[str]:
    """The user's own words as memory sentences: the summary of last resort when the model gives none."""
    return [f"사용자는 \"{t['text']}\"라고 말했다." for t in dialogue
            if t["role"] == "user" and len(t["text"]) <= MAX_SENTENCE_CHARS - 20]


def accumulate(previous: list[Sentence], additions: list[str], provenance: str = "added") -> list[Sentence]:
    """Previous memory (as it was) followed by the new sentences it does not already hold."""
    kept = [Sentence(s.text, "kept", s.id) for s in previous]
    seen = {s.text for s in previous}
    return kept + [Sentence(t, provenance) for t in dict.fromkeys(additions) if t not in seen]
