"""Per-user FAISS indexes over the latest memory version: a cache rebuilt from SQLite, never the truth."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from memory.store import Version
from models.embedders import Embedder


@dataclass
class _Entry:
    version_id: int
    index: "object"                 # faiss.IndexIDMap2
    texts: dict[int, str]


class IndexCache:
    """Holds one inner-product index per user, keyed to the version it was built from."""

    def __init__(self, embedder: Embedder):
        import faiss

        self._faiss = faiss
        self.embedder = embedder
        self._entries: dict[int, _Entry] = {}
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

    def build(self, version: Version) -> _Entry:
        index = self._faiss.IndexIDMap2(self._faiss.IndexFlatIP(self.embedder.dim))
        ids = np.array([s.id for s in version.sentences], dtype=np.int64)
        if len(ids):
            index.add_with_ids(self.embedder.index_rows(self.vectors(version)), ids)
        entry = _Entry(version.id, index, {int(s.id): s.text for s in version.sentences if s.id is not None})
        with self._lock:
            self._entries[version.user_id] = entry
        return entry

    def get(self, version: Version) -> _Entry:
        with self._lock:
            entry = self._entries.get(version.user_id)
        if entry is None or entry.version_id != version.id:
            entry = self.build(version)
        return entry

    def drop(self, user_id: int) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def search(self, version: Version, query_vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(sentence id, cosine score) best first."""
        entry = self.get(version)
        k = min(k, entry.index.ntotal)
        if k <= 0:
            return []
        scores, ids = entry.index.search(query_vector.reshape(1, -1).astype(np.float32), k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i != -1]
