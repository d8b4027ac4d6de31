"""The memory engine: commits versions with their embeddings and retrieves sentences for a turn."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from typing import Any

import numpy as np

from memory.fusion import CONTEXT_TURNS, CONTEXT_WEIGHT, DEFAULT_METHOD, check_method, fuse
from memory.index import Entry, IndexCache
from memory.lexical import MAX_CHARS, tokens
from memory.provenance import by_person
from memory.redact import forget_sentence
from memory.rerank import CANDIDATES, Reranker, rerank
from memory.store import Erased, Sentence, Store, Version
from memory.when import asked, held, said_on
from memory.when import boost as time_boost
from models.base import estimate_tokens
from models.embedders import Embedder


@dataclass(frozen=True)
class Hit:
    text: str
    score: float
    sentence_id: int


class MemoryEngine:
    """SQLite for truth, FAISS for speed: every commit refreshes the user's index."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        count_tokens: Callable[[str], int] = estimate_tokens,
        method: str = DEFAULT_METHOD,
        day: Callable[[str], date] | None = None,
        reranker: Reranker | None = None,
    ):
        self.store = store
        # a stored time's date where the user lives (LocalTime.day: KEEM_TIMEZONE); UTC's when not told
        self.day = day or (lambda when: datetime.fromisoformat(when).date())
        self.embedder = embedder
        self.count_tokens = count_tokens
        self.method = check_method(method)  # dense, lexical or hybrid (memory/fusion.py)
        self.index = IndexCache(embedder)
        self.reranker = reranker  # KEEM_RERANKER: reorders search's best CANDIDATES (memory/rerank.py); None: off
        self._generation: int | None = None  # the store's forget count when the cache last checked its users

    def sweep(self) -> None:
        """Drop the cached indexes of users forgotten since the last look, by this or any other process (the store's
        forget counter moved). Cache keys are never-reused user and version ids, so a stale entry could never serve
        another user; this removes the forgotten user's text from memory. One small query per call."""
        generation = self.store.users.generation()
        if generation != self._generation:
            self.index.keep_only(self.store.users.existing)
            self._generation = generation

    def current(self, user_id: int) -> Version | None:
        return self.store.versions.latest(user_id)

    def commit(
        self,
        user_id: int,
        sentences: list[Sentence],
        cues: Mapping[str, str] | None = None,
        *,
        base: int | None,
        **meta: Any,
    ) -> Version:
        """Embed the sentences that need it and commit one new version on `base`, the number of the version the
        caller started from (None: none); the store rebases or refuses a stale base (memory/store/rebase.py), and
        the user's index is rebuilt from what was committed.

        Vectors and cue words of unchanged text are reused from the previous version; `cues` ({text: cue words},
        memory/cues.py) adds or replaces cue words, which are embedded as the sentence's second search view.
        """
        previous = self.current(user_id)
        if meta.get("author") in ("user", "import"):  # a person's sentences: when written, what each continues
            sentences = by_person(sentences, meta["author"], previous)
        mine = [s for s in (previous.sentences if previous else ()) if s.embedder == self.embedder.name]
        known = {s.text: s.embedding for s in mine if s.embedding is not None}
        known_cues = {s.text: s.cues for s in previous.sentences if s.cues} if previous else {}
        known_cue_vectors = {s.cues: s.cue_embedding for s in mine if s.cues and s.cue_embedding is not None}
        sentences = [replace(s, text=s.text.strip()) for s in sentences]
        words = {s.text: (cues or {}).get(s.text) or s.cues or known_cues.get(s.text) for s in sentences}
        for vectors, texts in ((known, [s.text for s in sentences]), (known_cue_vectors, list(words.values()))):
            todo = list(dict.fromkeys(t for t in texts if t and t not in vectors))
            if todo:
                vectors.update(zip(todo, self.embedder.embed(todo)))
        ready = [
            replace(
                s,
                embedder=self.embedder.name,
                embedding=known[s.text],
                cues=words[s.text],
                cue_embedding=known_cue_vectors.get(words[s.text] or ""),
            )
            for s in sentences
        ]
        version = self.store.versions.commit(user_id, ready, base=base, **meta)
        self._ready(self.index.build(version))
        return version

    def _ready(self, entry: Entry) -> Entry:
        """The entry with what this engine's method searches built (BM25 for lexical and hybrid; for hybrid the days
        of memory/when.py too: 0.9 s at 10,000 sentences), so a turn never waits for it."""
        if self.method != "dense":
            self.index.lexical(entry)
        if self.method == "hybrid":
            self._days(entry)
        return entry

    def rank(
        self, entry: Entry, query: str, limit: int, context: Sequence[str] = (), today: date | None = None
    ) -> list[tuple[int, float]]:
        """(sentence id, score) of the `limit` best sentences for `query`, best first, by this engine's method.
        `context`: the user's turns just before it, oldest first; the last CONTEXT_TURNS join the query with
        weight CONTEXT_WEIGHT. Hybrid also weighs a time the query names (resolved against `today`, the user's
        date): memory/when.py. Any text is a query: no word, only emoji, a long paste (its first MAX_CHARS
        characters), mixed scripts."""
        query = query[:MAX_CHARS]
        earlier = " ".join(t[:MAX_CHARS] for t in list(context)[-CONTEXT_TURNS:] if t.strip())[-MAX_CHARS:]
        ids = list(entry.texts)
        dense = np.zeros(len(ids), dtype=np.float32)
        if self.method != "lexical":
            vector = self.embedder.embed_query(query)
            if earlier:
                mixed = vector + CONTEXT_WEIGHT * self.embedder.embed_query(earlier)
                vector = (mixed / max(float(np.linalg.norm(mixed)), 1e-12)).astype(np.float32)
            if self.method == "dense":
                return self.index.search(entry, vector, limit)
            dense_of = dict(self.index.search(entry, vector, len(ids)))
            dense = np.array([dense_of.get(i, -1.0) for i in ids], dtype=np.float32)
        lexical = self.index.lexical(entry)
        words = lexical.scores(tokens(query))
        if earlier:
            words = words + CONTEXT_WEIGHT * lexical.scores(tokens(earlier))
        scores = fuse(self.method, dense, words)
        if self.method == "hybrid" and (wanted := asked(query, today or self.today())):
            scores = scores + time_boost(wanted, *self._days(entry))
        order = np.argsort(-scores, kind="stable")[:limit]
        return [(ids[i], float(scores[i])) for i in order]

    def today(self) -> date:
        return self.day(datetime.now(timezone.utc).isoformat())

    def _days(self, entry: Entry) -> tuple[list[list[tuple[date, date]]], list[date | None]]:
        """The days each sentence of `entry` names and the day it was said, worked out once per version."""
        if entry.days is None:
            sessions = sorted({int(s["session"]) for s in entry.said if s.get("session") is not None})
            started = self.store.sessions.started(entry.user_id, sessions) if entry.user_id is not None else {}
            session_days = {i: self.day(at) for i, at in started.items()}
            said = [said_on(s, session_days, self.day) for s in entry.said]
            entry.days = ([held(t) for t in entry.texts.values()], said)
        return entry.days

    def search(
        self,
        user_id: int,
        query: str,
        k: int = 5,
        token_budget: int | None = None,
        context: Sequence[str] = (),
        today: date | None = None,
    ) -> list[Hit]:
        """Top-k sentences of the latest version by score (SQLite is asked only for the latest version id), for
        `query` and, more weakly, `context` (the user's turns before it, oldest first: `rank`); `today`: the user's
        date, for a query that names a time (default: today where the engine's `day` puts it).

        When the whole memory fits `token_budget`, every sentence comes back, most relevant first. With a reranker,
        the best CANDIDATES by the fused score come in its order (memory/rerank.py).
        """
        self.sweep()
        version_id = self.store.versions.latest_id(user_id)
        if version_id is None:
            return []
        entry = self._ready(self.index.entry(user_id, version_id, lambda: self.store.versions.latest(user_id)))  # type: ignore[arg-type,return-value]
        limit = k
        if token_budget is not None:
            if entry.tokens is None:  # once per version, not on every turn
                entry.tokens = sum(self.count_tokens(t) for t in entry.texts.values())
            if entry.tokens <= token_budget:
                limit = len(entry.texts)
        if self.reranker is None:
            ranked = self.rank(entry, query, limit, context, today)
        else:
            fused = self.rank(entry, query, max(limit, CANDIDATES), context, today)
            ranked = rerank(self.reranker, query, fused, entry.texts)
        return [Hit(entry.texts[i], score, i) for i, score in ranked[:limit]]

    def pinned(self, user_id: int, query: str, token_budget: int) -> tuple[int | None, list[Hit]]:
        """The memory a session's system prompt holds, in the version's own order (so it is byte-stable), with
        the version it came from: the whole memory when it fits `token_budget`, else the sentences most relevant
        to `query` (a session's first message) that fit it. Chosen once per session and version; what later
        messages retrieve beyond it goes in a note after the history (chatbot/session.py)."""
        version_id = self.store.versions.latest_id(user_id)
        if version_id is None:
            return None, []
        entry = self._ready(self.index.entry(user_id, version_id, lambda: self.store.versions.latest(user_id)))  # type: ignore[arg-type,return-value]
        if entry.tokens is None:
            entry.tokens = sum(self.count_tokens(t) for t in entry.texts.values())
        chosen: set[int] = set(entry.texts)
        if entry.tokens > token_budget:
            chosen, room = set(), token_budget
            for i, _ in self.rank(entry, query, len(entry.texts)):
                need = self.count_tokens(entry.texts[i]) + 4
                if need <= room:
                    chosen.add(i)
                    room -= need
        return version_id, [Hit(text, 0.0, i) for i, text in entry.texts.items() if i in chosen]

    def warm(self, user_id: int) -> None:
        """Build the user's index ahead of the first turn."""
        self.sweep()
        version = self.current(user_id)
        if version is not None:
            self._ready(self.index.entry(user_id, version.id, lambda: version))

    def forget(self, user_id: int) -> Erased:
        """Delete everything about the user, with no copy left in the database file (memory/store/erasure.py)."""
        erased = self.store.erasure.forget_user(user_id)
        self.index.drop(user_id)
        return erased

    def forget_sentence(self, user_id: int, text: str) -> Erased:
        """Remove a sentence of the current memory (a memory row's "완전히 지우기"), and its earlier and later
        forms, from every version; redact the turns that said it (memory/redact.py) and summary lines in versions'
        details. The index is rebuilt from what remains; the stored vectors of the other sentences are reused."""
        erased = forget_sentence(self.store, user_id, text)
        self.index.drop(user_id)
        self.warm(user_id)
        return erased
