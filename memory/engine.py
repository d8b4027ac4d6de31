"""The memory engine: commits versions with their embeddings and retrieves sentences for a turn."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from memory.index import IndexCache
from memory.store import Sentence, Store, Version
from models.base import estimate_tokens
from models.embedders import Embedder


@dataclass(frozen=True)
class Hit:
    text: str
    score: float
    sentence_id: int


class MemoryEngine:
    """SQLite for truth, FAISS for speed: every commit refreshes the user's index."""

    def __init__(self, store: Store, embedder: Embedder, count_tokens: Callable[[str], int] = estimate_tokens):
        self.store = store
        self.embedder = embedder
        self.count_tokens = count_tokens
        self.index = IndexCache(embedder)

    def current(self, user_id: int) -> Version | None:
        return self.store.latest_version(user_id)

    def commit(self, user_id: int, sentences: list[Sentence], **meta: Any) -> Version:
        """Embed the sentences that need it (reusing vectors of unchanged text) and commit one new version."""
        previous = self.current(user_id)
        known = {}
        if previous:
            known = {s.text: s.embedding for s in previous.sentences
                     if s.embedding is not None and s.embedder == self.embedder.name}
        sentences = [replace(s, text=s.text.strip()) for s in sentences]
        todo = list(dict.fromkeys(s.text for s in sentences if s.text not in known))
        known.update(zip(todo, self.embedder.embed(todo)))
        ready = [replace(s, embedder=self.embedder.name, embedding=known[s.text]) for s in sentences]
        version = self.store.commit_version(user_id, ready, **meta)
        self.index.build(version)
        return version

    def search(self, user_id: int, query: str, k: int = 5, token_budget: int | None = None) -> list[Hit]:
        """Top-k sentences of the latest version by cosine score.

        When the whole memory fits `token_budget`, every sentence comes back, most relevant first.
        """
        version = self.current(user_id)
        if version is None or not version.sentences:
            return []
        texts = {s.id: s.text for s in version.sentences}
        limit = k
        if token_budget is not None and sum(self.count_tokens(t) for t in texts.values()) <= token_budget:
            limit = len(texts)
        query_vector = self.embedder.embed_query(query)
        return [Hit(texts[i], score, i) for i, score in self.index.search(version, query_vector, limit)]

    def forget(self, user_id: int) -> None:
        self.store.delete_user(user_id)
        self.index.drop(user_id)
