"""Fusion of several rankings (reciprocal rank, weighted z-scores), as benchmarks/ko_retrieval.py compares them.

The BM25 they fuse is the product's (memory/lexical.py LexicalIndex); the product's own hybrid rule is
memory/fusion.py's, which these were measured against (docs/benchmarks.md "Korean retrieval")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
