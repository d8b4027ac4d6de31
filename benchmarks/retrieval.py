"""Retrieval methods side by side, through the product's own search (MemoryEngine.search): dense, lexical, hybrid.

Rows per method (memory/fusion.py METHODS):
- Korean paraphrases (evaluation/data/ko_retrieval.json: 10 users, 109 memory sentences, 107 later-session
  utterances): recall at 1, 3 and 5 of the needed sentence;
- LoCoMo (--locomo FILE, snap-research/locomo data/locomo10.json, never bundled): evidence hit@5 over
  categories 1-4, each conversation one user whose memory is its observations (keem eval retrieval's path);
- the time of one turn's search, median and p95 over the Korean utterances, on one core (the process pinned to
  one CPU, e5 and FAISS on one thread), for one user holding 1,000 and 10,000 sentences: the latest-version
  lookup, the query's embedding (also timed alone), FAISS and, for lexical and hybrid, BM25 and the fusion.
  Stored vectors are random (the search costs the same whatever they mean); texts are real ones (the Korean set
  and, with --locomo, LoCoMo's observations), numbered to be distinct;
- index memory per 1,000 sentences: FAISS's float32 rows and ids, and the BM25 index's Python and numpy
  allocations (tracemalloc), with the time to build BM25 (paid once per memory version, at commit or warm-up);
- with --reranker SPEC (KEEM_RERANKER's values, memory/rerank.py), one more row, "hybrid+rerank": the hybrid
  ranking's 20 best reordered by it, its Korean recall and its per-turn time (LoCoMo's rows go through
  `keem eval retrieval`, which has no reranker: "-"). `chat` reranks with --model.

Usage: python benchmarks/retrieval.py [--locomo FILE] [--methods dense,lexical,hybrid] [--sizes 1000,10000]
       [--embedder auto] [--reranker off|chat|cross-encoder:PATH] [--model SPEC] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluation.files import read_json  # noqa: E402
from memory.engine import MemoryEngine  # noqa: E402
from memory.fusion import METHODS  # noqa: E402
from memory.lexical import LexicalIndex  # noqa: E402
from memory.rerank import Reranker  # noqa: E402
from memory.store import Sentence, Store  # noqa: E402
from models.embedders import Embedder  # noqa: E402

DATA = ROOT / "evaluation" / "data" / "ko_retrieval.json"
RERANKED = "hybrid+rerank"  # the row of --reranker


def engines(store: Store, embedder: Embedder, methods: list[str], reranker: Reranker | None) -> dict[str, MemoryEngine]:
    """One engine per row: each method, and hybrid with the reranker when there is one."""
    out = {m: MemoryEngine(store, embedder, method=m) for m in methods}
    if reranker is not None:
        out[RERANKED] = MemoryEngine(store, embedder, method="hybrid", reranker=reranker)
    return out


class Remembered(Embedder):
    """The embedder, each text embedded once for every method (the name is the inner one's, so stored vectors
    count as its own)."""

    def __init__(self, inner: Embedder):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.rows: dict[str, np.ndarray] = {}
        self.queries: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.rows]
        if todo:
            self.rows.update(zip(todo, self.inner.embed(todo)))
        return np.stack([self.rows[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)

    def index_rows(self, rows: np.ndarray, texts: list[str]) -> np.ndarray:
        return self.inner.index_rows(rows, texts)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.queries:
            self.queries[text] = self.inner.embed_query(text)
        return self.queries[text]


def korean(embedder: Embedder, methods: list[str], path: Path, reranker: Reranker | None = None) -> dict[str, dict]:
    """R@1/3/5 per method over every utterance of the Korean set, each user's memory one imported version."""
    users = read_json(path)["users"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="keem-retrieval-") as tmp:
        store = Store(Path(tmp) / "ko.db")
        try:
            rows = engines(store, embedder, methods, reranker)
            first = next(iter(rows.values()))
            ranks: dict[str, list[int]] = {m: [] for m in rows}
            for user in users:
                uid = store.users.get_or_create(user["user"])
                texts = [m["text"] for m in user["memory"]]
                first.commit(
                    uid, [Sentence(t) for t in texts], base=None, strategy="import", status="ok", author="import"
                )
                text_of = {m["id"]: m["text"] for m in user["memory"]}
                for q in user["queries"]:
                    wanted = {text_of[i] for i in q["relevant"]}
                    for m, engine in rows.items():
                        hits = [h.text for h in engine.search(uid, q["text"], k=len(texts))]
                        ranks[m].append(next(r for r, t in enumerate(hits, 1) if t in wanted))
        finally:
            store.close()
    for m, r in ranks.items():
        a = np.array(r)
        out[m] = {"n": len(a), **{f"R@{k}": round(float(np.mean(a <= k)), 3) for k in (1, 3, 5)}}
    return out


def locomo(embedder: Embedder, methods: list[str], path: Path) -> dict[str, dict]:
    from evaluation.corpora.locomo import evaluate, load_locomo

    conversations = load_locomo(path)
    out = {}
    for m in methods:
        r = evaluate(conversations, embedder, k=5, method=m).as_json()
        out[m] = {"questions": r["queries"], "hit@5": r["hit_at_k"], "reachable": r["reachable"]}
    return out


def corpus_texts(locomo_path: Path | None) -> list[str]:
    texts = [m["text"] for u in read_json(DATA)["users"] for m in u["memory"]]
    if locomo_path is not None:
        from evaluation.corpora.locomo import load_locomo, observations

        texts += [o.text for e in load_locomo(locomo_path) for o in observations(e)]
    return texts


def timing(
    embedder: Embedder, methods: list[str], sizes: list[int], texts: list[str], reranker: Reranker | None = None
) -> dict[str, dict]:
    """Per size: each method's per-turn search time (ms), and the index memory and BM25 build time."""
    queries = [q["text"] for u in read_json(DATA)["users"] for q in u["queries"]]
    rng = np.random.default_rng(0)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="keem-retrieval-") as tmp:
        store = Store(Path(tmp) / "scale.db")
        try:
            for n in sizes:
                memory = [f"{texts[i % len(texts)]} ({i // len(texts) + 1})" for i in range(n)]
                vectors = rng.standard_normal((n, embedder.dim), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                uid = store.users.get_or_create(f"scale-{n}")
                store.versions.commit(
                    uid,
                    [Sentence(t, embedding=v, embedder=embedder.name) for t, v in zip(memory, vectors)],
                    base=None,
                    strategy="import",
                    status="ok",
                    author="import",
                )
                row: dict = {}
                started = time.perf_counter()
                LexicalIndex(memory)
                row["bm25_build_s"] = round(time.perf_counter() - started, 2)
                tracemalloc.start()
                held_index = LexicalIndex(memory)
                held, _ = tracemalloc.get_traced_memory()  # what the index keeps (the build's temporaries freed)
                tracemalloc.stop()
                del held_index
                row["bm25_mb_per_1k"] = round(held / 2**20 / (n / 1000), 2)
                row["faiss_mb_per_1k"] = round((embedder.dim * 4 + 8) * 1000 / 2**20, 2)  # float32 rows + int64 ids
                ms = []
                for q in queries:  # the query's embedding alone: what every method but lexical pays first
                    started = time.perf_counter()
                    embedder.embed_query(q)
                    ms.append((time.perf_counter() - started) * 1000)
                row["embed_p50_ms"] = round(statistics.median(ms), 2)
                for m, engine in engines(store, embedder, methods, reranker).items():
                    engine.warm(uid)  # the index (and BM25) built as a session's start builds it
                    for q in queries[:5]:
                        engine.search(uid, q)
                    ms = []
                    for q in queries:
                        started = time.perf_counter()
                        engine.search(uid, q)
                        ms.append((time.perf_counter() - started) * 1000)
                    row[m] = {
                        "p50_ms": round(statistics.median(ms), 2),
                        "p95_ms": round(float(np.percentile(ms, 95)), 2),
                    }
                out[str(n)] = row
        finally:
            store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, help="LoCoMo JSON (data/locomo10.json); its rows are skipped without it")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated: dense, lexical, hybrid")
    ap.add_argument("--sizes", default="1000,10000", help="memory sizes (sentences of one user) to time")
    ap.add_argument("--embedder", default="auto", help="embedder spec (default auto: e5-small, else USE)")
    ap.add_argument("--reranker", default="off", help="adds the row hybrid+rerank: chat or cross-encoder:<path>")
    ap.add_argument("--model", default="demo", help="the chat model --reranker chat reranks with (a model spec)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        ap.error(f"--methods: unknown {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if args.locomo and not args.locomo.exists():
        ap.error(f"--locomo {args.locomo}: no such file (get data/locomo10.json from snap-research/locomo)")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the targets say
    from models.e5 import E5Embedder
    from models.errors import ModelUnavailableError
    from models.spec import load_embedder

    try:  # e5 on one thread, where it installs
        inner = load_embedder(args.embedder) if args.embedder not in ("auto", "e5") else E5Embedder(threads=1)
    except ModelUnavailableError:
        if args.embedder != "auto":
            raise
        inner = load_embedder("auto")
    embedder = Remembered(inner)
    reranker = None
    if args.reranker != "off":
        from memory.rerank import load_reranker
        from models.base import ChatModel
        from models.spec import load_chat_model

        reranker = load_reranker(args.reranker, load_chat_model(args.model) if args.reranker == "chat" else ChatModel())
    started = time.perf_counter()
    result: dict = {"embedder": embedder.name, "methods": methods, "reranker": args.reranker}
    result["korean"] = korean(embedder, methods, DATA, reranker)
    if args.locomo:
        result["locomo"] = locomo(embedder, methods, args.locomo)
    result["timing"] = timing(  # the embedder itself: every turn embeds its query
        embedder.inner, methods, [int(s) for s in args.sizes.split(",") if s], corpus_texts(args.locomo), reranker
    )
    result["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return 0
    sizes = list(result["timing"])
    head = " | ".join(f"turn p50 / p95 at {int(s):,} (ms)" for s in sizes)
    print(f"| method | Korean R@1 | R@3 | R@5 | LoCoMo hit@5 | {head} |")
    print("|---|---|---|---|---|" + "---|" * len(sizes))
    for m in result["korean"]:
        ko = result["korean"][m]
        lo = result.get("locomo", {}).get(m, {}).get("hit@5")
        times = " | ".join(f"{result['timing'][s][m]['p50_ms']} / {result['timing'][s][m]['p95_ms']}" for s in sizes)
        print(f"| {m} | {ko['R@1']} | {ko['R@3']} | {ko['R@5']} | {'-' if lo is None else lo} | {times} |")
    for s in sizes:
        t = result["timing"][s]
        print(
            f"\n{int(s):,} sentences: the query's embedding alone {t['embed_p50_ms']} ms p50; FAISS "
            f"{t['faiss_mb_per_1k']} MB and BM25 {t['bm25_mb_per_1k']} MB per 1,000 sentences; BM25 built in "
            f"{t['bm25_build_s']} s"
        )
    print(f"\nembedder {embedder.name}, {result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
