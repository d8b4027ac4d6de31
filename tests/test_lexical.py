"""BM25 over Kiwi morphemes and rank/score fusion, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.lexical import BM25, ranks, rrf, weighted, zscore
from memory.korean import morphemes


def _bm25() -> BM25:
    # Whitespace tokens keep the arithmetic checkable by hand: lengths 2, 3, 1 -> mean 2.
    return BM25(k1=1.2, b=0.75, tokenize=str.split).fit(["a b", "b c c", "d"])


def test_bm25_single_term_matches_the_formula():
    # idf(a) = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(8/3); doc 0 has average length, so tf part = 1.
    assert _bm25().scores("a") == pytest.approx([math.log(8 / 3), 0.0, 0.0])


def test_bm25_term_frequency_and_length_normalisation():
    # doc 1: tf(c) = 2, length 3 -> K = 1.2 * (0.25 + 0.75 * 3/2) = 1.65; 2 * 2.2 / (2 + 1.65).
    assert _bm25().scores("c")[1] == pytest.approx(math.log(8 / 3) * 4.4 / 3.65)


def test_bm25_counts_a_repeated_query_term_once_and_ranks_short_documents_higher():
    scores = _bm25().scores("b b")
    # idf(b) = ln(1 + 1.5 / 2.5) = ln 1.6; doc 0: 2.2 / (1 + 1.2) = 1; doc 1: 2.2 / (1 + 1.65).
    assert scores == pytest.approx([math.log(1.6), math.log(1.6) * 2.2 / 2.65, 0.0])


def test_bm25_unknown_words_and_empty_index_score_zero():
    assert not _bm25().scores("zzz").any()
    assert BM25().fit([]).scores("고양이").shape == (0,)


def test_bm25_on_kiwi_morphemes_matches_inflected_forms():
    index = BM25().fit(["사용자는 고양이를 키운다", "사용자는 서울에 산다"])
    scores = index.scores("고양이 키우는 거 힘들지?")
    assert scores[0] > 0 and scores[1] == 0
    assert "사용자" not in morphemes("사용자는 고양이를 키운다")
    assert {"고양이", "키우"} <= set(morphemes("사용자는 고양이를 키운다"))


def test_ranks_are_one_based_and_ties_share_the_best_rank():
    assert ranks(np.array([0.5, 0.9, 0.5, 0.1])).tolist() == [2, 1, 2, 4]


def test_rrf_sums_reciprocal_ranks_with_weights():
    a, b = np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0])
    assert rrf([a, b], k=1) == pytest.approx([1 / 2 + 1 / 4, 1 / 3 + 1 / 3, 1 / 4 + 1 / 2])
    assert rrf([a, b], k=1, weights=[2, 1]) == pytest.approx([2 / 2 + 1 / 4, 2 / 3 + 1 / 3, 2 / 4 + 1 / 2])


def test_rrf_ignores_a_ranking_with_no_information():
    dense, lexical = np.array([0.2, 0.9, 0.4]), np.zeros(3)  # no shared word: all BM25 scores tie
    assert ranks(rrf([dense, lexical])).tolist() == [3, 1, 2]


def test_zscore_and_weighted_fusion():
    s = math.sqrt(2 / 3)
    assert zscore(np.array([1.0, 2.0, 3.0])) == pytest.approx([-1 / s, 0, 1 / s])
    assert not zscore(np.array([4.0, 4.0])).any()
    assert not weighted([np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])], [1, 1]).any()
    # [0, 0, 5]: mean 5/3, spread sqrt(50/9) -> z = [-1/sqrt2, -1/sqrt2, sqrt2].
    fused = weighted([np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 5.0])], [1.0, 0.5])
    r = 1 / math.sqrt(2)
    assert fused == pytest.approx([-1 / s - 0.5 * r, -0.5 * r, 1 / s + 0.5 * math.sqrt(2)])
