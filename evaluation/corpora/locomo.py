"""LoCoMo retrieval hit@k through the product's own retrieval path (SQLite store + MemoryEngine + FAISS).

The LoCoMo file (snap-research/locomo, data/locomo10.json) is read by evaluation/corpora/episodes.py like every corpus:
each sample is an Episode whose sessions carry LoCoMo's observations (`session_N_observation`: the memory, one
user per sample, every speaker's) and whose questions are its `qa`. An observation is relevant to a question when
one of its dialogue ids is among the question's evidence ids; a question is a hit at k when one of the k
sentences the engine returns is relevant. Category 5 (adversarial, unanswerable) is left out by default.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.corpora.episodes import Episode, Observation, dia_ids, read_episodes
from memory.fusion import DEFAULT_METHOD
from models.embedders import Embedder
from models.errors import InputError

__all__ = ["CATEGORY_NAMES", "DEFAULT_CATEGORIES", "Result", "dia_ids", "evaluate", "load_locomo", "observations"]

# The usual reading of LoCoMo's category numbers (as in the Mem0 and A-Mem evaluations).
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_CATEGORIES = (1, 2, 3, 4)


def observations(episode: Episode) -> list[Observation]:
    """Every observation of every session, in session order: the memory retrieval searches."""
    return [o for s in episode.sessions for o in s.observations]


def load_locomo(path: str | Path) -> list[Episode]:
    """The samples of a LoCoMo file, refused when no sample has observations or questions to score."""
    episodes = read_episodes(path, "locomo")
    if not any(observations(e) for e in episodes):
        raise InputError(
            f"{path}: no observations found: a LoCoMo sample needs "
            "'observation': {'session_1_observation': {speaker: [[text, dia_id], ...]}}"
        )
    if not any(e.questions for e in episodes):
        raise InputError(
            f"{path}: no questions found: a LoCoMo sample needs 'qa': [{{'question', 'evidence', 'category'}}]"
        )
    return episodes


@dataclass
class _Tally:
    queries: int = 0
    hits: int = 0
    reachable: int = 0
    reachable_hits: int = 0
    reciprocal: float = 0.0

    def add(self, reachable: bool, rank: int | None) -> None:
        self.queries += 1
        self.reachable += reachable
        if rank is not None:
            self.hits += 1
            self.reachable_hits += 1
            self.reciprocal += 1.0 / rank

    def as_json(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "hits": self.hits,
            "hit_at_k": round(self.hits / self.queries, 4) if self.queries else None,
            "mrr_at_k": round(self.reciprocal / self.queries, 4) if self.queries else None,
            "reachable": self.reachable,
            "hit_at_k_reachable": round(self.reachable_hits / self.reachable, 4) if self.reachable else None,
        }


@dataclass
class Result:
    embedder: str
    k: int
    categories: tuple[int, ...]
    method: str = DEFAULT_METHOD
    overall: _Tally = field(default_factory=_Tally)
    per_category: dict[int, _Tally] = field(default_factory=dict)
    per_conversation: list[dict[str, Any]] = field(default_factory=list)
    skipped_no_evidence: int = 0
    ignored_other_categories: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def hit_at_k(self) -> float:
        return self.overall.hits / self.overall.queries if self.overall.queries else 0.0

    def as_json(self, with_misses: bool = False) -> dict[str, Any]:
        out = {
            "embedder": self.embedder,
            "retrieval": self.method,
            "k": self.k,
            "categories": list(self.categories),
            **self.overall.as_json(),
            "per_category": {
                str(c): {"name": CATEGORY_NAMES.get(c, f"category {c}"), **t.as_json()}
                for c, t in sorted(self.per_category.items())
            },
            "per_conversation": self.per_conversation,
            "skipped_no_evidence": self.skipped_no_evidence,
            "ignored_other_categories": self.ignored_other_categories,
            "observations": sum(c["observations"] for c in self.per_conversation),
            "seconds": round(self.seconds, 2),
        }
        if with_misses:
            out["misses"] = self.misses
        return out


def evaluate(
    conversations: Iterable[Episode],
    embedder: Embedder,
    k: int = 5,
    categories: Iterable[int] = DEFAULT_CATEGORIES,
    db_dir: str | Path | None = None,
    method: str = DEFAULT_METHOD,
) -> Result:
    """hit@k of every question (of the chosen categories, with evidence) of every conversation.

    Each conversation (a LoCoMo sample) becomes one user of a fresh SQLite store whose memory is one imported
    version holding its observations, each said on its session's date; each question goes through
    MemoryEngine.search, exactly as a chat turn, with `method` (dense, lexical or hybrid: memory/fusion.py; hybrid
    weighs a date the question names, memory/when.py).
    """
    from memory.engine import MemoryEngine
    from memory.store import Sentence, Store, note

    if k < 1:
        raise InputError("--k must be at least 1")
    chosen = tuple(sorted(set(int(c) for c in categories)))
    result = Result(embedder=getattr(embedder, "name", "?"), k=k, categories=chosen, method=method)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="keem-locomo-", dir=db_dir) as tmp:
        store = Store(Path(tmp) / "locomo.db")
        try:
            engine = MemoryEngine(store, embedder, method=method)
            for number, conv in enumerate(conversations, 1):
                observed = observations(conv)
                row = {"sample_id": conv.id, "observations": len(observed)}
                tally = _Tally()
                questions = []
                for q in conv.questions:
                    if q.category not in chosen:
                        result.ignored_other_categories += 1
                    elif not q.evidence:
                        result.skipped_no_evidence += 1
                    else:
                        questions.append(q)
                if not observed or not questions:
                    result.per_conversation.append({**row, **tally.as_json()})
                    continue
                user_id = store.users.get_or_create(f"locomo-{number}")
                version = engine.commit(
                    user_id,
                    # each observation said on its session's date, as a chat's sentences are (memory/when.py)
                    [
                        Sentence(o.text, "imported", sources={"step": "import", "said": s.date} if s.date else None)
                        for s in conv.sessions
                        for o in s.observations
                    ],
                    base=None,  # a new user per conversation
                    strategy="import",
                    status="ok",
                    author="import",
                    notes=[note("corpus", corpus="LoCoMo", conversation=conv.id)],
                )
                ids_of = {s.id: o.dia_ids for s, o in zip(version.sentences, observed)}
                known = frozenset().union(*ids_of.values())
                for q in questions:
                    hits = engine.search(user_id, q.text, k=k)
                    rank = next(
                        (r for r, h in enumerate(hits, 1) if ids_of.get(h.sentence_id, frozenset()) & q.evidence), None
                    )
                    reachable = bool(known & q.evidence)
                    for t in (tally, result.overall, result.per_category.setdefault(q.category, _Tally())):
                        t.add(reachable, rank)
                    if rank is None:
                        result.misses.append(
                            {
                                "sample_id": conv.id,
                                "category": q.category,
                                "question": q.text,
                                "evidence": sorted(q.evidence),
                                "reachable": reachable,
                                "retrieved": [h.text for h in hits],
                            }
                        )
                result.per_conversation.append({**row, **tally.as_json()})
        finally:
            store.close()
    result.seconds = time.perf_counter() - started
    return result
