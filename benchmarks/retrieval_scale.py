"""Per-user top-5 memory search at scale: the product's IndexCache (one FlatIndex per user: FAISS IndexFlatIP with
the sentence ids) against numpy brute force over the same user's rows.

N stored sentences are spread over N / --per-user users (default 100 each: 1k -> 10 users, 1M -> 10,000 users).
Vectors are random, L2-normalised, 384-d float32 (the size of MiniLM / e5-small; retrieval cost does not depend
on what the numbers mean). Indexes are built exactly as the product builds them, IndexCache.build(version) from
a memory Version whose sentences carry their stored vectors (no re-embedding: the benchmark embedder refuses
to embed). Queries go through IndexCache.search(version, vector, 5), the call MemoryEngine.search makes after
loading the user's latest version from SQLite and embedding the query; those two steps are not timed here
(the query embedding dominates a real turn: several ms on CPU).

Each size runs in a fresh child process so that its RSS is its own. "index MB" = RSS growth while building
the per-user indexes; "raw MB" = N x dim x 4 bytes, the vectors alone.

--corpus: the other shape, one index over every sentence searched with many queries at once (how a search over a
whole corpus runs), timed on the CPU and, where faiss is a GPU build and sees a GPU, on the GPU
(memory/vector_index.py FlatIndex), beside one user's 100 rows on each: a row per device and size with the
single-query p50, batched queries per second and whether the GPU's top-5 equals the CPU's.

Usage: python benchmarks/retrieval_scale.py [--sizes 1k,100k,1M] [--per-user 100] [--queries 2000] [--json]
       python benchmarks/retrieval_scale.py --corpus [--sizes 1M] [--batch 1000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory.index import MAX_USERS, IndexCache  # noqa: E402
from memory.store import Sentence, Version  # noqa: E402
from models.embedders import Embedder  # noqa: E402

DIM = 384
K = 5


class StoredVectorsOnly(Embedder):
    """Stands in for the embedder whose vectors are stored; embedding anything would be a benchmark bug."""

    name = "bench-random-384"
    dim = DIM

    def embed(self, texts: list[str]) -> np.ndarray:
        raise AssertionError(f"IndexCache re-embedded {len(texts)} sentences; the stored vectors should be used")


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def version_of(user: int, rows: np.ndarray, first_id: int) -> Version:
    sentences = tuple(
        Sentence(f"u{user} s{i}", "imported", id=first_id + i, embedding=row, embedder=StoredVectorsOnly.name)
        for i, row in enumerate(rows)
    )
    return Version(
        id=user + 1,
        user_id=user,
        number=1,
        session_id=None,
        strategy="import",
        status="ok",
        model_spec=None,
        prompt_hash=None,
        author="import",
        created_at="",
        sentences=sentences,
    )


def percentiles(ms: list[float]) -> tuple[float, float]:
    a = np.asarray(ms)
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def run_size(n: int, per_user: int, queries: int, seed: int = 0) -> dict:
    """Build every user's index through IndexCache, then time `queries` single-query searches both ways."""
    import faiss

    users = max(1, n // per_user)
    n = users * per_user
    rng = np.random.default_rng(seed)
    start_rss = rss_mb()
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    base_rss = rss_mb()

    cache = IndexCache(StoredVectorsOnly(), max_users=users)  # hold every user: this measures search, not rebuilds
    thin = []  # the cache entries MemoryEngine.search would look up by version id
    started = time.perf_counter()
    for u in range(users):
        rows = vectors[u * per_user : (u + 1) * per_user]
        thin.append(cache.build(version_of(u, rows, u * per_user)))  # the Version (and its Sentences) is dropped
    build_s = time.perf_counter() - started
    gc.collect()
    index_mb = rss_mb() - base_rss

    picks = rng.integers(0, users, size=queries)
    qs = rng.standard_normal((queries, DIM), dtype=np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)

    def numpy_top(u: int, q: np.ndarray) -> np.ndarray:
        scores = vectors[u * per_user : (u + 1) * per_user] @ q
        top = np.argpartition(-scores, K - 1)[:K] if len(scores) > K else np.arange(len(scores))
        return top[np.argsort(-scores[top])] + u * per_user

    for u, q in zip(picks[:50], qs[:50]):  # warm-up
        cache.search(thin[u], q, K)
        numpy_top(u, q)
    shipped_threads = faiss.omp_get_max_threads()
    faiss_ms, numpy_ms, one_ms, agree = [], [], [], 0
    for u, q in zip(picks, qs):  # as shipped (IndexCache sets faiss to 1 thread)
        t0 = time.perf_counter_ns()
        got = cache.search(thin[u], q, K)
        t1 = time.perf_counter_ns()
        ref = numpy_top(u, q)
        t2 = time.perf_counter_ns()
        faiss_ms.append((t1 - t0) / 1e6)
        numpy_ms.append((t2 - t1) / 1e6)
        agree += [i for i, _ in got] == ref.tolist()
    faiss.omp_set_num_threads(1)  # 1 thread explicitly, for comparison
    for u, q in zip(picks, qs):
        t0 = time.perf_counter_ns()
        cache.search(thin[u], q, K)
        one_ms.append((time.perf_counter_ns() - t0) / 1e6)
    faiss.omp_set_num_threads(shipped_threads)
    f50, f95 = percentiles(faiss_ms)
    n50, n95 = percentiles(numpy_ms)
    o50, o95 = percentiles(one_ms)
    return {
        "n": n,
        "users": users,
        "per_user": per_user,
        "queries": queries,
        "faiss_p50_ms": f50,
        "faiss_p95_ms": f95,
        "faiss1_p50_ms": o50,
        "faiss1_p95_ms": o95,
        "faiss_over_1ms": float(np.mean(np.asarray(faiss_ms) > 1.0)),
        "numpy_p50_ms": n50,
        "numpy_p95_ms": n95,
        "same_top5": agree / queries,
        "build_s": build_s,
        "rss_mb": rss_mb(),
        "start_rss_mb": start_rss,
        "index_mb": index_mb,
        "raw_mb": n * DIM * 4 / 2**20,
        "index_overhead_kb_per_user": max(0.0, index_mb - n * DIM * 4 / 2**20) * 1024 / users,
        "faiss_threads": shipped_threads,
    }


class LookupEmbedder(Embedder):
    """Serves precomputed random vectors by text, so engine timings leave the real embedding cost out."""

    name = "bench-lookup-384"
    dim = DIM

    def __init__(self) -> None:
        self.rows: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts]) if texts else np.zeros((0, DIM), np.float32)


def run_engine(n: int, per_user: int, queries: int, seed: int = 1) -> dict:
    """The whole dense MemoryEngine.search (latest-version id from SQLite + IndexCache.search), embedding excluded
    (the default, hybrid, adds BM25 and the fusion: benchmarks/retrieval.py times it)."""
    import tempfile

    import faiss

    from memory.engine import MemoryEngine
    from memory.store import Store

    users = max(1, n // per_user)
    rng = np.random.default_rng(seed)
    emb = LookupEmbedder()
    with tempfile.TemporaryDirectory(prefix="keem-scale-") as tmp:
        store = Store(Path(tmp) / "scale.db")
        engine = MemoryEngine(store, emb, method="dense")  # the FAISS path; benchmarks/retrieval.py times hybrid
        started = time.perf_counter()
        ids = []
        for u in range(users):
            texts = [f"user {u} sentence {i}" for i in range(per_user)]
            rows = rng.standard_normal((per_user, DIM), dtype=np.float32)
            emb.rows.update(zip(texts, rows / np.linalg.norm(rows, axis=1, keepdims=True)))
            uid = store.users.get_or_create(f"u{u}")
            engine.commit(
                uid,
                [Sentence(t, "imported") for t in texts],
                base=None,
                strategy="import",
                status="ok",
                author="import",
            )
            ids.append(uid)
        commit_s = time.perf_counter() - started
        qtexts = [f"query {j}" for j in range(queries)]
        qrows = rng.standard_normal((queries, DIM), dtype=np.float32)
        emb.rows.update(zip(qtexts, qrows / np.linalg.norm(qrows, axis=1, keepdims=True)))
        picks = rng.integers(0, users, size=queries)
        out = {"n": users * per_user, "users": users, "commit_s": commit_s}
        shipped = faiss.omp_get_max_threads()
        for label, threads in (("shipped", shipped), ("1thread", 1)):
            faiss.omp_set_num_threads(threads)
            for j in range(min(50, queries)):
                engine.search(ids[picks[j]], qtexts[j], K)
            ms = []
            for j in range(queries):
                t0 = time.perf_counter_ns()
                engine.search(ids[picks[j]], qtexts[j], K)
                ms.append((time.perf_counter_ns() - t0) / 1e6)
            out[f"{label}_p50_ms"], out[f"{label}_p95_ms"] = percentiles(ms)
        faiss.omp_set_num_threads(shipped)
        store.close()
    return out


def run_corpus(n: int, per_user: int, queries: int, batch: int, seed: int = 2) -> list[dict]:
    """One FlatIndex over `n` vectors and one over a user's `per_user`, on the CPU and (where usable) the GPU:
    single-query latency, batched throughput, and the GPU's top-5 against the CPU's."""
    from memory.vector_index import FlatIndex, gpu_status

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    qs = rng.standard_normal((max(queries, batch), DIM), dtype=np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    status = gpu_status()
    devices = ["cpu"] + (["gpu"] if status.usable else [])
    out = []
    for rows in sorted({min(per_user, n), n}):
        reference: np.ndarray | None = None
        for device in devices:
            started = time.perf_counter()
            index = FlatIndex(vectors[:rows], device=device)
            build_s = time.perf_counter() - started
            for q in qs[:20]:  # warm-up
                index.search(q, K)
            single = []
            for q in qs[:queries]:
                t0 = time.perf_counter_ns()
                index.search(q, K)
                single.append((time.perf_counter_ns() - t0) / 1e6)
            started = time.perf_counter()
            _, top = index.search(qs[:batch], K)
            batch_s = time.perf_counter() - started
            if reference is None:
                reference = top
            p50, p95 = percentiles(single)
            out.append(
                {
                    "rows": rows,
                    "device": device,
                    "build_s": build_s,
                    "single_p50_ms": p50,
                    "single_p95_ms": p95,
                    "batch": batch,
                    "batch_queries_per_s": batch / batch_s if batch_s > 0 else float("inf"),
                    "same_top5_as_cpu": float(np.mean(np.all(top == reference, axis=1))),
                    "gpu": status.reason,
                }
            )
    return out


def corpus_table(rows: list[dict]) -> str:
    head = (
        f"{'rows':>9} | {'device':>6} | {'build s':>7} | {'1 query p50/p95 ms':>18} | "
        f"{'queries/s (batch)':>17} | {'top-5 = CPU':>11}"
    )
    return ruled(
        head,
        [
            f"{r['rows']:>9,} | {r['device']:>6} | {r['build_s']:>7.2f} | "
            f"{r['single_p50_ms']:>8.3f}/{r['single_p95_ms']:<9.3f} | "
            f"{r['batch_queries_per_s']:>10,.0f} ({r['batch']}) | {r['same_top5_as_cpu']:>11.1%}"
            for r in rows
        ],
    )


def ruled(head: str, lines: list[str]) -> str:
    return "\n".join([head, "-" * len(head), *lines])


def table(rows: list[dict]) -> str:
    head = (
        f"{'N':>9} | {'users':>6} | {'p50 ms':>6} | {'p95 ms (faiss)':>14} | {'p50/p95 (faiss, 1 thread)':>25} | "
        f"{'p50/p95 (numpy)':>15} | {'index build s':>13} | {'RSS MB':>6} | {'index MB':>8} | {'raw MB':>6}"
    )
    return ruled(
        head,
        [
            f"{r['n']:>9,} | {r['users']:>6,} | {r['faiss_p50_ms']:>6.3f} | {r['faiss_p95_ms']:>14.3f} | "
            f"{'':>11}{r['faiss1_p50_ms']:.3f}/{r['faiss1_p95_ms']:<7.3f} | "
            f"{r['numpy_p50_ms']:>7.3f}/{r['numpy_p95_ms']:<7.3f} | {r['build_s']:>13.2f} | "
            f"{r['rss_mb']:>6.0f} | {r['index_mb']:>8.0f} | {r['raw_mb']:>6.0f}"
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1k,100k,1M", help="stored sentences in all, comma-separated (1k,100k,1M)")
    p.add_argument("--per-user", type=int, default=100, help="sentences per user (default 100)")
    p.add_argument("--queries", type=int, default=2000, help="timed queries per size (default 2000)")
    p.add_argument(
        "--engine-size",
        default="20k",
        help="also time the whole MemoryEngine.search over a SQLite store of this many sentences "
        "(default 20k; 0 skips it)",
    )
    p.add_argument(
        "--corpus",
        action="store_true",
        help="time one index over every sentence (many queries at once) on the CPU and, where usable, the GPU",
    )
    p.add_argument("--batch", type=int, default=1000, help="--corpus: queries per batched search (default 1000)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    p.add_argument("--inline", action="store_true", help="run every size in this process (RSS accumulates)")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if args.corpus:
        found = [r for n in sizes for r in run_corpus(n, args.per_user, min(args.queries, 500), args.batch)]
        if args.json:
            print(json.dumps(found, indent=2))
            return 0
        print(f"one flat index, top-{K}, {DIM}-d float32; GPU: {found[0]['gpu']}")
        print(corpus_table(found))
        return 0
    rows = []
    for n in sizes:
        if args.inline or len(sizes) == 1:
            row = run_size(n, args.per_user, args.queries)
        else:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--sizes",
                    str(n),
                    "--per-user",
                    str(args.per_user),
                    "--queries",
                    str(args.queries),
                    "--json",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            row = json.loads(out)[0]
        rows.append(row)
        if not args.json and len(sizes) > 1:
            print(f"  done N={row['n']:,} ({row['build_s']:.1f} s index build)", file=sys.stderr, flush=True)
    engine = None
    if parse_size(args.engine_size) > 0 and not (args.json and len(sizes) == 1 and not args.inline):
        engine = run_engine(parse_size(args.engine_size), args.per_user, args.queries)
    if args.json:
        print(json.dumps(rows if engine is None else {"index": rows, "engine": engine}, indent=2))
        return 0
    print(
        f"per-user top-{K} search, {DIM}-d float32, {args.per_user} sentences per user, "
        f"{args.queries} queries per size (faiss threads: {rows[0]['faiss_threads']})"
    )
    print(table(rows))
    if engine:
        print(
            f"\nwhole MemoryEngine.search (latest-version id from SQLite + IndexCache.search; "
            f"query embedding excluded), {engine['n']:,} sentences / {engine['users']:,} users in SQLite: "
            f"p50 {engine['shipped_p50_ms']:.3f} ms, p95 {engine['shipped_p95_ms']:.3f} ms "
            f"(faiss 1 thread: {engine['1thread_p50_ms']:.3f} / {engine['1thread_p95_ms']:.3f} ms); "
            f"committing them took {engine['commit_s']:.1f} s"
        )
    big = max(rows, key=lambda r: r["n"])
    verdict = "meets" if big["faiss_p50_ms"] <= 2.0 else "MISSES"
    print(
        f"\ntarget p50 <= 2 ms at {big['n']:,}: IndexCache.search p50 {big['faiss_p50_ms']:.3f} ms {verdict} it; "
        f"p95 {big['faiss_p95_ms']:.3f} ms with faiss's {big['faiss_threads']} OpenMP threads "
        f"({big['faiss_over_1ms']:.0%} of queries over 1 ms), {big['faiss1_p95_ms']:.3f} ms with 1 thread."
    )
    if engine:
        print(
            f"whole engine.search p50: {engine['shipped_p50_ms']:.3f} ms as shipped, "
            f"{engine['1thread_p50_ms']:.3f} ms with 1 faiss thread."
        )
    print(
        f"IndexCache memory beyond the raw vectors: {big['index_overhead_kb_per_user']:.1f} KB per user "
        f"({big['users']:,} users); the cache keeps the {MAX_USERS:,} most recently searched users (LRU)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
