"""The interface every memory-update strategy implements (text helpers: memory/text.py; steps: steps.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Protocol

from memory.store import Note, Sentence
from memory.store.emotions import EmotionRecord

Progress = Callable[[str], None]


@dataclass(frozen=True)
class UpdateInput:
    """What a strategy sees: the previous memory, this session's dialogue, and when things happened."""

    previous: list[Sentence]
    dialogue: list[dict[str, str]]  # [{"role": "user"|"assistant", "text": ...}]
    session_date: date
    previous_date: date | None = None
    records: list[EmotionRecord] = field(default_factory=list)  # the previous version's emotion records
    session_id: int | None = None  # the session being remembered (records note where they were seen)


@dataclass
class UpdateResult:
    sentences: list[Sentence]
    status: str  # ok | fallback (then details["fallback"] says why: not_asked | no_summary | not_verified)
    model_spec: str | None = None
    prompt_hash: str | None = None
    notes: list[Note] = field(default_factory=list)  # why, as codes (memory/store/notes.py)
    details: dict[str, Any] = field(default_factory=dict)
    records: list[EmotionRecord] | None = None  # emotion-and-cause records (Steps.with_records); None: carried


class Updater(Protocol):
    name: str

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult: ...

    def calls(self, inp: UpdateInput) -> int:
        """The model calls `update(inp)` makes when its answers are good (a cut answer, a failed verification or a
        failed records call asks again: not counted), from its steps (memory/updaters/steps.py): ZeroGPU asks for
        GPU time by it (chatbot/deploy/zerogpu.py)."""
        ...


def carry_over(previous: Iterable[Sentence], provenance: str = "kept") -> list[Sentence]:
    """Sentences of a stored version carried into the next one: the same text (with its stored vectors and cue
    words), each continuing its original (`origin_id`), marked `provenance` (kept, or restored by the guard).
    Every writer of a new version carries sentences over with this, so a diff follows them (memory/diff.py)."""
    return [replace(s, provenance=provenance, origin_id=s.id, id=None) for s in previous]


def memory_of(texts: Iterable[str]) -> list[Sentence]:
    """A memory given as plain texts (a dataset row, a benchmark's previous step) as the previous version an update
    starts from: ids are positions, so the new sentences can name the one they continue."""
    return [Sentence(text, "kept", id=i) for i, text in enumerate(texts)]


def accumulate(previous: list[Sentence], additions: list[str], provenance: str = "added") -> list[Sentence]:
    """Previous memory (carried over as it was) followed by the new sentences it does not already hold."""
    seen = {s.text for s in previous}
    return carry_over(previous) + [Sentence(t, provenance) for t in dict.fromkeys(additions) if t not in seen]
