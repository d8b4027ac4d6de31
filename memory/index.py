"""Per-user FAISS indexes over the latest memory version: a cache rebuilt from SQLite, never the truth."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory.lexical import LexicalIndex
from memory.store import Sentence, Version
from memory.vector_index import FlatIndex, device_setting, gpu_status, load_faiss, place
from memory.when import WHEN_KEYS
from models.embedders import Embedder

MAX_USERS = 2048  # indexes kept in memory; the least recently searched user's is rebuilt on demand (~3 ms)


@dataclass
class Entry:
    version_id: int
    index: FlatIndex  # on the CPU, or a GPU where KEEM_FAISS_DEVICE places it (memory/vector_index.py)
    texts: dict[int, str]  # sentence id -> text
    cue_index: FlatIndex | None = None  # the same ids over their cue words (memory/cues.py), when any have them
    tokens: int | None = None  # the whole memory's token count, filled in by the first search that needs it
    cues: dict[int, str] = field(default_factory=dict)  # sentence id -> its cue words, for those that have them
    lexical: LexicalIndex | None = None  # BM25 over texts and cue words (ids in `texts` order), built on first use
    # the words of the same user's previous version's texts, reused when `lexical` is built (then let go of)
    known: dict[str, list[str]] = field(default_factory=dict, repr=False)
    # where each sentence came from, as memory/when.py reads it (WHEN_KEYS of its sources; in `texts` order)
    said: list[dict[str, Any]] = field(default_factory=list)
    # the days each sentence names and the day it was said (memory/when.py), filled in by the first query naming a time
    days: tuple[list[list[tuple[Any, Any]]], list[Any]] | None = None
    user_id: int | None = None


def lexical_text(text: str, cues: str | None) -> str:
    """What BM25 reads of a sentence: its text and its cue words."""
    return f"{text} {cues or ''}"


class IndexCache:
    """One inner-product index per user, keyed to the version it was built from, least recently used evicted."""

    def __init__(self, embedder: Embedder, max_users: int = MAX_USERS, faiss: Any | None = None):
        # One query searches one user's few hundred rows: extra OpenMP threads only add tail latency; and it stays
        # on the CPU unless KEEM_FAISS_DEVICE / KEEM_FAISS_GPU_MIN_ROWS place it on a GPU (memory/vector_index.py).
        self._faiss = faiss or load_faiss()  # a test's fake GPU build, else the installed one
        self._faiss.omp_set_num_threads(1)
        if device_setting() == "gpu":  # checked where it enters: an app asked for a GPU it lacks says so at start
            place(0, "gpu", gpu_status(self._faiss))
        self.embedder = embedder
        self.max_users = max_users
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._lock = threading.Lock()

    def _rows(self, items: list[tuple[str, np.ndarray | None]]) -> np.ndarray:
        """(text, stored vector or None) -> vectors, embedding only the texts whose stored vector is unusable."""
        rows = np.zeros((len(items), self.embedder.dim), dtype=np.float32)
        missing = []
        for i, (_, vector) in enumerate(items):
            if vector is not None and vector.size == self.embedder.dim:
                rows[i] = vector
            else:
                missing.append(i)
        if missing:
            rows[missing] = self.embedder.embed([items[i][0] for i in missing])
        return rows

    def _index(self, ids: list[int], items: list[tuple[str, np.ndarray | None]]) -> FlatIndex:
        rows = self.embedder.index_rows(self._rows(items), [text for text, _ in items]) if ids else self._rows([])
        return FlatIndex(rows, ids=ids, faiss=self._faiss)

    def build(self, version: Version) -> Entry:
        def stored(vector: np.ndarray | None, s: Sentence) -> np.ndarray | None:
            return vector if s.embedder == self.embedder.name else None  # another embedder's vectors are re-made

        with self._lock:  # the user's index before this version: its sentences' words are not read again
            before = self._entries.get(version.user_id)
        stored_rows = [(s.id, s) for s in version.sentences if s.id is not None]  # a committed version's: all
        index = self._index([i for i, _ in stored_rows], [(s.text, stored(s.embedding, s)) for _, s in stored_rows])
        cued = [(i, s.cues, s) for i, s in stored_rows if s.cues]
        cue_index = (
            self._index([i for i, _, _ in cued], [(cues, stored(s.cue_embedding, s)) for _, cues, s in cued])
            if cued
            else None
        )
        words = before.lexical.words if before is not None and before.lexical is not None else {}
        # only this version's texts: a sentence erased from it leaves nothing of itself here
        known = {t: words[t] for t in (lexical_text(s.text, s.cues) for _, s in stored_rows) if t in words}
        entry = Entry(
            version.id,
            index,
            {i: s.text for i, s in stored_rows},
            cue_index=cue_index,
            cues={i: cues for i, cues, _ in cued},
            said=[{k: v for k, v in (s.sources or {}).items() if k in WHEN_KEYS} for _, s in stored_rows],
            user_id=version.user_id,
            known=known,
        )
        with self._lock:
            self._entries[version.user_id] = entry
            self._entries.move_to_end(version.user_id)
            while len(self._entries) > self.max_users:
                self._entries.popitem(last=False)
        return entry

    def entry(self, user_id: int, version_id: int, load: Callable[[], Version]) -> Entry:
        """The user's index for `version_id`, loading and building it only when the cached one is stale."""
        with self._lock:
            entry = self._entries.get(user_id)
            if entry is not None and entry.version_id == version_id:
                self._entries.move_to_end(user_id)
                return entry
        return self.build(load())

    def cached_users(self) -> list[int]:
        """The users whose index is in memory now, least recently used first."""
        with self._lock:
            return list(self._entries)

    def drop(self, user_id: int) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def keep_only(self, alive: Callable[[list[int]], set[int]]) -> list[int]:
        """Drop the indexes of users `alive` (given the cached ids) says are gone; returns the dropped ids."""
        cached = self.cached_users()
        living = alive(cached) if cached else set()
        gone = [u for u in cached if u not in living]
        with self._lock:
            for user_id in gone:
                self._entries.pop(user_id, None)
        return gone

    def lexical(self, entry: Entry) -> LexicalIndex:
        """The entry's BM25 index over each sentence with its cue words, built the first time a search needs it
        (a dense-only deployment never pays for it); it goes wherever the entry goes (a new version, a forget)."""
        if entry.lexical is None:
            texts = [lexical_text(text, entry.cues.get(i)) for i, text in entry.texts.items()]
            built = LexicalIndex(texts, entry.known)
            with self._lock:
                if entry.lexical is None:
                    entry.lexical, entry.known = built, {}
        return entry.lexical

    def search(self, entry: Entry, query_vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(sentence id, score) best first; a sentence with cue words scores by the better of its two views."""
        best: dict[int, float] = {}
        query = query_vector.reshape(1, -1).astype(np.float32)
        for index in (entry.index, entry.cue_index):
            n = min(k, index.ntotal) if index is not None else 0
            if index is None or n <= 0:
                continue
            scores, ids = index.search(query, n)
            for i, score in zip(ids[0], scores[0]):
                if i != -1 and score > best.get(int(i), -np.inf):
                    best[int(i)] = float(score)
        return sorted(best.items(), key=lambda item: -item[1])[:k]
