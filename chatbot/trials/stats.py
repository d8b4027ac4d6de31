"""The statistics of a trial report: mean with a t-based 95% interval, Kruskal-Wallis between strategies, and
pairwise Mann-Whitney U tests with Holm's correction (scipy)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from models.errors import ModelUnavailableError


def _stats():
    try:
        from scipy import stats
    except ImportError:
        raise ModelUnavailableError("keem trial report needs scipy; install it: pip install 'scipy>=1.11'") from None
    return stats


def mean_ci(values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """n, mean, sd and the t interval of the mean (None where n < 2; a zero-width one when all values agree),
    cut to `bounds` (a rating scale) where given."""
    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(_stats().t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds:
        low, high = max(low, float(bounds[0])), min(high, float(bounds[1]))
    return {"n": n, "mean": mean, "sd": sd, "ci95": [low, high]}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def compare(groups: dict[str, Sequence[float]]) -> dict[str, Any]:
    """Kruskal-Wallis across the groups with at least one value, and every pair's two-sided Mann-Whitney U with
    Holm-adjusted p and the rank-biserial correlation (positive: the first strategy rated higher). A test that
    cannot run says why in `skipped`."""
    stats = _stats()
    present = {name: list(v) for name, v in groups.items() if len(v)}
    out: dict[str, Any] = {"kruskal": None, "pairs": [], "skipped": None}
    if len(present) < 2:
        out["skipped"] = "fewer than two strategies have ratings"
        return out
    values = [v for vs in present.values() for v in vs]
    if len(set(values)) == 1:
        out["skipped"] = "every rating is the same"
        return out
    h, p = stats.kruskal(*present.values())
    out["kruskal"] = {
        "H": float(h),
        "p": float(p),
        "df": len(present) - 1,
        "n": {name: len(v) for name, v in present.items()},
    }
    pairs: list[dict[str, Any]] = []
    for a, b in combinations(present, 2):
        u, p = stats.mannwhitneyu(present[a], present[b], alternative="two-sided")
        n1, n2 = len(present[a]), len(present[b])
        pairs.append(
            {"a": a, "b": b, "U": float(u), "p": float(p), "r": 2 * float(u) / (n1 * n2) - 1, "n_a": n1, "n_b": n2}
        )
    for pair, adjusted in zip(pairs, holm([pr["p"] for pr in pairs])):
        pair["p_holm"] = adjusted
    out["pairs"] = pairs
    return out
