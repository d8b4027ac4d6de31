"""Lexical retrieval for Korean: BM25 over Kiwi morphemes, and fusion of several rankings.

Used by benchmarks/ko_retrieval.py to compare hybrid retrieval with the product's dense search; the product does
not ship it (fusing it with the default embedder did not help: docs/benchmarks.md "Korean retrieval")."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from memory.korean import morphemes


class BM25:
    """Okapi BM25 over one user's sentences; `fit(texts)` then `scores(query)` -> one score per text."""

    def __init__(self, k1: float = 1.2, b: float = 0.75, tokenize: Callable[[str], list[str]] = morphemes):
        self.k1, self.b, self.tokenize = k1, b, tokenize
        self.counts: list[Counter[str]] = []
        self.lengths = np.zeros(0, dtype=np.float64)
        self.idf: dict[str, float] = {}

    def fit(self, texts: Sequence[str]) -> BM25:
        """Index `texts` (replacing any previous ones); returns self."""
        docs = [self.tokenize(t) for t in texts]
        self.counts = [Counter(d) for d in docs]
        self.lengths = np.array([len(d) for d in docs], dtype=np.float64)
        n = len(docs)
        df = Counter(term for c in self.counts for term in c)
        # Lucene's non-negative idf: a term in every document still counts a little.
        self.idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        return self

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every fitted text for `query` (zeros when nothing is shared)."""
        out = np.zeros(len(self.counts), dtype=np.float64)
        if not self.counts:
            return out
        avg = float(self.lengths.mean()) or 1.0
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths / avg)
        for term in set(self.tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            tf = np.array([c.get(term, 0) for c in self.counts], dtype=np.float64)
            out += idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based competition rank of each item, best score first; tied items share the best rank."""
    scores = np.asarray(scores, dtype=np.float64)
    return 1 + (scores[None, :] > scores[:, None]).sum(axis=1)


def rrf(score_lists: Sequence[np.ndarray], k: float = 60.0, weights: Sequence[float] | None = None) -> np.ndarray:
    """Reciprocal-rank fusion: sum of w / (k + rank) over the rankings."""
    weights = weights or [1.0] * len(score_lists)
    return np.sum([w / (k + ranks(s)) for w, s in zip(weights, score_lists)], axis=0)


def zscore(scores: np.ndarray) -> np.ndarray:
    """Scores shifted to mean 0 and scaled to unit spread (all-equal scores -> zeros)."""
    scores = np.asarray(scores, dtype=np.float64)
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 1e-12 else np.zeros_like(scores)


def weighted(score_lists: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Weighted sum of z-normalised scores, so cosine and BM25 scales can be mixed."""
    return np.sum([w * zscore(s) for w, s in zip(weights, score_lists)], axis=0)
