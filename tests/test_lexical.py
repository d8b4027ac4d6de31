"""Rank and score fusion (benchmarks/lexical.py), checked against hand-computed values. The BM25 they fuse is
memory/lexical.py's, tested in tests/test_retrieval_methods.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.lexical import ranks, rrf, weighted, zscore


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
