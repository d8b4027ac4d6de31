"""Keyword recall: TextRank over a Kiwi noun graph, weighted by TF-IDF across the dialogues (the paper's metric).

For each dialogue document the nouns (Kiwi NNG/NNP, minus the ubiquitous ones) form a graph whose edges join
nouns at most `window - 1` positions apart within one utterance. PageRank (damping 0.85) ranks the nodes;
a node's keyword score is its PageRank times its smoothed IDF across all documents,
idf(w) = ln((1 + N) / (1 + df(w))) + 1, so words every dialogue shares ("오늘", "생각") sink.
Recall of a memory is the share of a document's top-k keywords found among the memory's nouns.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from memory.korean import STOP, kiwi

NOUN_TAGS = ("NNG", "NNP")
KEYWORD_SETS = (5, 7, 10)
DAMPING = 0.85
WINDOW = 3


@functools.lru_cache(maxsize=8192)
def nouns(text: str) -> tuple[str, ...]:
    """Nouns of a text in order (Kiwi NNG/NNP), minus stop words ("사용자", "것", ...)."""
    return tuple(t.form for t in kiwi().tokenize(text) if t.tag in NOUN_TAGS and t.form not in STOP)


def pagerank(
    nodes: Sequence[str],
    edges: dict[tuple[str, str], float],
    damping: float = DAMPING,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> dict[str, float]:
    """Weighted PageRank on an undirected graph; dangling nodes spread their rank evenly. Scores sum to 1."""
    n = len(nodes)
    if n == 0:
        return {}
    index = {w: i for i, w in enumerate(nodes)}
    weights = np.zeros((n, n))
    for (a, b), w in edges.items():
        weights[index[a], index[b]] += w
        weights[index[b], index[a]] += w
    out = weights.sum(axis=1)
    dangling = out == 0
    transition = np.divide(weights, out[:, None], out=np.zeros_like(weights), where=~dangling[:, None])
    rank = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        new = (1 - damping) / n + damping * (rank @ transition + rank[dangling].sum() / n)
        if np.abs(new - rank).sum() < tol:
            rank = new
            break
        rank = new
    return {w: float(rank[index[w]]) for w in nodes}


def noun_graph(
    utterances: Iterable[Sequence[str]], window: int = WINDOW
) -> tuple[list[str], dict[tuple[str, str], float]]:
    """Nodes in first-seen order and co-occurrence edge weights (nouns within `window` in one utterance)."""
    nodes: dict[str, None] = {}
    edges: Counter[tuple[str, str]] = Counter()
    for words in utterances:
        for i, w in enumerate(words):
            nodes.setdefault(w)
            for v in words[i + 1 : i + window]:
                if v != w:
                    edges[(w, v) if w < v else (v, w)] += 1
    return list(nodes), dict(edges)


def idf_table(documents: Sequence[Sequence[Sequence[str]]]) -> dict[str, float]:
    """Smoothed IDF of each noun over documents (each a list of utterances' noun lists)."""
    df: Counter[str] = Counter()
    for doc in documents:
        df.update({w for words in doc for w in words})
    n = len(documents)
    return {w: math.log((1 + n) / (1 + c)) + 1 for w, c in df.items()}


def keywords(doc: Sequence[Sequence[str]], idf: dict[str, float], k: int, window: int = WINDOW) -> list[str]:
    """Top-k nouns of one document by PageRank x IDF (ties broken by first appearance)."""
    nodes, edges = noun_graph(doc, window)
    rank = pagerank(nodes, edges)
    order = {w: i for i, w in enumerate(nodes)}
    scored = sorted(nodes, key=lambda w: (-rank[w] * idf.get(w, 1.0), order[w]))
    return scored[:k]


def recall(keys: Sequence[str], memory: Sequence[str]) -> float:
    """Share of `keys` among the nouns of the memory sentences (1.0 when there are no keys)."""
    if not keys:
        return 1.0
    present = {w for sentence in memory for w in nouns(sentence)}
    return sum(1 for w in keys if w in present) / len(keys)


def dialogue_doc(
    dialogues: Sequence[Sequence[dict[str, str]]], roles: tuple[str, ...] = ("user", "assistant")
) -> list[tuple[str, ...]]:
    """A document: the noun lists of every turn (of the given roles) of the given session dialogues."""
    return [nouns(t["text"]) for d in dialogues for t in d if t["role"] in roles]


def keyword_recall(
    docs: Sequence[list[tuple[str, ...]]],
    memories: Sequence[Sequence[str]],
    sizes: Sequence[int] = KEYWORD_SETS,
    idf_docs: Sequence[list[tuple[str, ...]]] | None = None,
) -> list[dict[int, float]]:
    """Per sample, {k: recall of the document's top-k keywords in its memory} for each keyword-set size."""
    idf = idf_table(idf_docs if idf_docs is not None else docs)
    out = []
    for doc, memory in zip(docs, memories, strict=True):
        ranked = keywords(doc, idf, max(sizes))
        out.append({k: recall(ranked[:k], memory) for k in sizes})
    return out
