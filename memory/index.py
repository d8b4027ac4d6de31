"""Per-user FAISS indexes over the latest memory version: a cache rebuilt from SQLite, never the truth."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from memory.store import Version
from models.embedders import Embedder

MAX_USERS = 2048  # indexes kept in memory; the least recently searched user's is rebuilt on demand (~3 ms)


@dataclass
class Entry:
    version_id: int
    index: "object"                 # faiss.IndexIDMap2
    texts: dict[int, str]           # sentence id -> text
    tokens: int | None = None       # the whole memory's token count, filled in by the first search that needs it


class IndexCache:
    """One inner-product index per user, keyed to the version it was built from, least recently used evicted."""

    def __init__(self, embedder: Embedder, max_users: int = MAX_USERS):
        import faiss

        # One query searches one user's few hundred rows: extra OpenMP threads only add tail latency.
        faiss.omp_set_num_threads(1)
        self._faiss = faiss
        self.embedder = embedder
        self.max_users = max_users
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._lock = threading.Lock()

    def vectors(self, version: Version) -> np.ndarray:
        """The version's sentence vectors: stored blobs where they came from this embedder, else re-embedded."""
        rows = np.zeros((len(version.sentences), self.embedder.dim), dtype=np.float32)
        missing = []
        for i, s in enumerate(version.sentences):
            if s.embedding is not None and s.embedder == self.embedder.name and s.embedding.size == self.embedder.dim:
                rows[i] = s.embedding
            else:
                missing.append(i)
        if missing:
            rows[missing] = self.embedder.embed([version.sentences[i].text for i in missing])
        return rows

    def build(self, version: Version) -> Entry:
        index = self._faiss.IndexIDMap2(self._faiss.IndexFlatIP(self.embedder.dim))
        ids = np.array([s.id for s in version.sentences], dtype=np.int64)
        if len(ids):
            texts = [s.text for s in version.sentences]
            index.add_with_ids(self.embedder.index_rows(self.vectors(version), texts), ids)
        entry = Entry(version.id, index, {int(s.id): s.text for s in version.sentences if s.id is not None})
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

    def drop(self, user_id: int) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def search(self, entry: Entry, query_vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(sentence id, score) best first."""
        k = min(k, entry.index.ntotal)
        if k <= 0:
            return []
        scores, ids = entry.index.search(query_vector.reshape(1, -1).astype(np.float32), k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i != -1]
