"""The interface every memory-update strategy implements (text helpers: memory/text.py; steps: steps.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

from memory.store import Sentence

Progress = Callable[[str], None]


@dataclass(frozen=True)
class UpdateInput:
    """What a strategy sees: the previous memory, this session's dialogue, and when things happened."""

    previous: list[Sentence]
    dialogue: list[dict[str, str]]  # [{"role": "user"|"assistant", "text": ...}]
    session_date: date
    previous_date: date | None = None


@dataclass
class UpdateResult:
    sentences: list[Sentence]
    status: str  # ok | fallback
    model_spec: str | None = None
    prompt_hash: str | None = None
    note: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Updater(Protocol):
    name: str

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult: ...


def accumulate(previous: list[Sentence], additions: list[str], provenance: str = "added") -> list[Sentence]:
    """Previous memory (as it was) followed by the new sentences it does not already hold."""
    kept = [Sentence(s.text, "kept", s.id) for s in previous]
    seen = {s.text for s in previous}
    return kept + [Sentence(t, provenance) for t in dict.fromkeys(additions) if t not in seen]
