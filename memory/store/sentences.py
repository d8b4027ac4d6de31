"""A memory version and its sentences, as values: what the store reads and writes (memory/store/versions.py) and
what a commit on a stale base is rebased with (memory/store/rebase.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory.store.emotions import EmotionRecord
from memory.store.notes import Note


@dataclass(frozen=True)
class Sentence:
    text: str
    provenance: str = "added"  # kept | added | rewritten | restored | imported | user | fallback
    origin_id: int | None = None  # the sentence of the previous version it continues, if any
    id: int | None = None
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)
    embedder: str | None = None
    cues: str | None = None  # words a later turn may use for it (memory/cues.py), when written
    cue_embedding: np.ndarray | None = field(default=None, compare=False, repr=False)  # same embedder as `embedding`
    sources: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # memory/provenance.py (ids only)
    # the times it holds as they were said ({"said": "다음 주 화요일", "as": "2026년 12월 8일", "on": "2026-12-03"}):
    # memory/dates.py anchor; the text holds the absolute time (m015)
    dates: tuple[dict[str, str], ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Version:
    id: int
    user_id: int
    number: int
    session_id: int | None
    strategy: str
    status: str  # ok | fallback | failed
    model_spec: str | None
    prompt_hash: str | None
    author: str  # updater | user | import
    created_at: str
    sentences: tuple[Sentence, ...]
    notes: tuple[Note, ...] = ()  # why it is as it is, as codes (memory/store/notes.py; m014)
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    records: tuple[EmotionRecord, ...] = field(default=(), compare=False)  # emotion-and-cause records (m011)

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.sentences]

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "created_at": self.created_at,
            "strategy": self.strategy,
            "status": self.status,
            "author": self.author,
            "session_id": self.session_id,
            "model": self.model_spec,
            "prompt_hash": self.prompt_hash,
            "notes": [n.as_json() for n in self.notes],
            "sentences": [
                {
                    "id": s.id,
                    "text": s.text,
                    "provenance": s.provenance,
                    **({"cues": s.cues} if s.cues else {}),
                    **({"dates": list(s.dates)} if s.dates else {}),
                }
                for s in self.sentences
            ],
        }
