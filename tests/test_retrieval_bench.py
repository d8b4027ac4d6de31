"""benchmarks/retrieval.py: a row per retrieval method on the Korean set and a LoCoMo-format file, and the per-turn
times and index sizes, through the product's own search (run in its own process: it pins itself to one core)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import build_nli_classifier

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """benchmarks/retrieval.py with `args`, in a process of its own."""
    return subprocess.run(
        [sys.executable, "benchmarks/retrieval.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_method_gets_its_rows_and_its_times_and_a_reranker_a_row_of_its_own(tmp_path):
    """One run of the benchmark (each costs seconds of process start and embedding): the three methods, and the
    reranker's row beside them."""
    folder = build_nli_classifier(tmp_path / "ce", {0: "relevance"}, always=None)  # random: it proves only the path
    args = ["--embedder", "ngram", "--sizes", "300", "--locomo", "evaluation/fixtures/locomo_mini.json"]
    done = bench(*args, "--reranker", f"cross-encoder:{folder}", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["methods"] == ["dense", "lexical", "hybrid"]
    for method in result["methods"]:
        korean = result["korean"][method]
        assert korean["n"] == 107 and 0 < korean["R@1"] <= korean["R@3"] <= korean["R@5"] <= 1
        assert result["locomo"][method]["questions"] > 0 and 0 <= result["locomo"][method]["hit@5"] <= 1
        assert 0 < result["timing"]["300"][method]["p50_ms"] <= result["timing"]["300"][method]["p95_ms"]
    # BM25 alone embeds nothing, so its row is the same whatever the embedder: docs/benchmarks.md's 0.178/0.364/0.542
    # (it finds only what shares words, and most of the set's paraphrases share none)
    assert result["korean"]["lexical"] == {"n": 107, "R@1": 0.178, "R@3": 0.364, "R@5": 0.542}
    sizes = result["timing"]["300"]
    assert sizes["bm25_mb_per_1k"] > 0 and sizes["faiss_mb_per_1k"] > 0 and sizes["embed_p50_ms"] >= 0
    # the reranker: a row of its own, the hybrid ranking reordered, and its time
    assert set(result["korean"]) == {"dense", "lexical", "hybrid", "hybrid+rerank"}
    assert result["korean"]["hybrid+rerank"]["n"] == 107
    assert result["korean"]["hybrid+rerank"] != result["korean"]["hybrid"]  # the reranker reordered
    assert 0 < result["timing"]["300"]["hybrid+rerank"]["p50_ms"]


def test_an_unknown_method_is_refused_with_the_choices():
    done = bench("--methods", "dense,bm25", timeout=120)
    assert done.returncode == 2 and "unknown bm25" in done.stderr and "hybrid" in done.stderr
