"""Korean lexical search: BM25 (bm25s) over Kiwi morphemes (English words stemmed with PyStemmer), one in-memory
index per user's memory version.

It lives beside the FAISS index in memory/index.py's cache entry, built from the same committed version, so it
follows every commit and leaves with every forget exactly as the dense index does; nothing is written to disk.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from memory.korean import CONTENT_TAGS, STOP, kiwi

K1 = 1.2
B = 0.75
MAX_CHARS = 2_000  # a long paste is searched by its start: Kiwi's time grows with the text
# English function words (bm25s's list): Kiwi tags every English word SL, and these say nothing about a topic.
ENGLISH_STOP = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with i you he she we me my your his her our do does did what when where who how".split()
)
NAME_TAGS = ("NNP", "SH")  # proper nouns and Hanja; an English word counts as a name when capitalised
_DATE = re.compile(r"(\d{1,4})\s*(년|월|일|시)")
_ONLY_PUNCT = re.compile(r"\W+")


def analyse(text: str) -> list[tuple[str, bool]]:
    """(word, is a name or date) for each content word of `text`, in order, repeats kept: Kiwi content lemmas
    (lower-cased), English function words and memory/korean.py's STOP words left out, and Korean dates as one
    word each ('5월', '3일', '2026년'), which Kiwi splits into a number and a unit."""
    text = text[:MAX_CHARS]
    if not text.strip():
        return []
    out = []
    for token in kiwi().tokenize(text):
        if not token.tag.startswith(CONTENT_TAGS):
            continue
        form = token.form.lower()
        if form in STOP or form in ENGLISH_STOP or _ONLY_PUNCT.fullmatch(form):
            continue
        name = token.tag.startswith(NAME_TAGS) or (token.tag == "SL" and token.form[:1].isupper())
        if token.tag == "SL":  # English: "painting", "paints" and "painted" are one word ("paint")
            form = english_stem(form)
        out.append((form, name or token.tag == "SN"))
    out.extend((number + unit, True) for number, unit in _DATE.findall(text))
    return out


@functools.cache
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def english_stem(word: str) -> str:
    """An English word's Snowball stem (PyStemmer, as bm25s stems): LoCoMo's evidence questions ask "What did
    Caroline paint?" of "Caroline painted a sunset" (measured in docs/benchmarks.md)."""
    return str(_stemmer().stemWord(word))


def tokens(text: str) -> list[str]:
    """The words BM25 compares for `text` (see `analyse`)."""
    return [word for word, _ in analyse(text)]


class LexicalIndex:
    """BM25 over one memory's sentences; `scores(words)` gives one score per sentence, in the order given.

    `known`: the words of texts already analysed (the user's previous version's index, `words`): a new version
    mostly keeps its sentences, and Kiwi then reads only the new ones (at 10,000 sentences, seconds a version)."""

    def __init__(self, texts: list[str], known: Mapping[str, list[str]] | None = None):
        self.size = len(texts)
        known = known or {}
        docs = [known[t] if t in known else tokens(t) for t in texts]
        self.words = dict(zip(texts, docs))  # text -> its words, for the next version's index
        self._bm25 = None
        if any(docs):
            import bm25s

            self._bm25 = bm25s.BM25(k1=K1, b=B)
            # bm25s wants a token in every document: a sentence with no content word gets one that no query has
            self._bm25.index([d or [""] for d in docs], show_progress=False)

    @property
    def vocabulary(self) -> frozenset[str]:
        """Every word the index holds (what an erasure test checks is gone)."""
        return frozenset(self._bm25.vocab_dict) - {""} if self._bm25 is not None else frozenset()

    def scores(self, words: list[str]) -> np.ndarray:
        """BM25 score of every sentence for the query `words` (a repeated word counts again); zeros when no word
        is shared."""
        if self._bm25 is None:
            return np.zeros(self.size, dtype=np.float32)
        known = [w for w in words if w and w in self._bm25.vocab_dict]
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm25.get_scores(known), dtype=np.float32)
