"""How a turn's query ranks one user's memory: dense (the embedder), lexical (BM25 on Kiwi morphemes) or hybrid.

The hybrid rule is the one that earned its place in benchmarks/retrieval.py (docs/benchmarks.md "Korean
retrieval"): the dense cosine plus a bounded lexical boost, `LEXICAL_WEIGHT` x (BM25 / the best BM25 of this
query). Reciprocal-rank fusion and z-scored sums were measured beside it: RRF gained less on LoCoMo, and a z-score
of BM25 lets one weak shared word outweigh any cosine in a large memory (most sentences score 0, so the one that
does not sits many spreads above the mean). A sentence sharing no word keeps its dense score, so on paraphrases
(which share few words) hybrid ranks as dense does.

The query is the user's message and, more weakly, their turns just before it (`CONTEXT_WEIGHT`): "걔 이름이 뭐였지?"
means little alone.
"""

from __future__ import annotations

import numpy as np

METHODS = ("dense", "lexical", "hybrid")
DEFAULT_METHOD = "hybrid"  # KEEM_RETRIEVAL's default: it gained on LoCoMo and lost nothing at R@3 in Korean
LEXICAL_WEIGHT = 0.05  # measured on LoCoMo conversations 0-2, checked on 3-9: 0.03-0.08 all gain, 0.05 most
CONTEXT_WEIGHT = 0.2  # the earlier turns' share of the query, against 1.0 for the message itself (measured: see below)
CONTEXT_TURNS = 2  # how many earlier user turns join the query


def check_method(method: str) -> str:
    if method not in METHODS:
        from models.errors import InputError

        raise InputError(f"retrieval method {method!r}: choose one of {', '.join(METHODS)}")
    return method


def boost(lexical: np.ndarray) -> np.ndarray:
    """BM25 scores scaled to 0..1 by this query's best (all zeros when no sentence shares a word)."""
    lexical = np.asarray(lexical, dtype=np.float32)
    best = float(lexical.max()) if lexical.size else 0.0
    return lexical / best if best > 0 else np.zeros_like(lexical)


def fuse(method: str, dense: np.ndarray, lexical: np.ndarray) -> np.ndarray:
    """One score per sentence under `method` (lexical: BM25 alone, no embedding); a higher score ranks first."""
    dense = np.asarray(dense, dtype=np.float32)
    if method == "dense":
        return dense
    if method == "lexical":
        return np.asarray(lexical, dtype=np.float32)
    return dense + LEXICAL_WEIGHT * boost(lexical)
