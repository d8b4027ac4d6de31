"""Write throughput of the store with many writers at once, SQLite and Postgres side by side.

Every write transaction takes the store's one write lock (SQLite: BEGIN IMMEDIATE; Postgres: one database-wide
advisory lock, docs/postgres.md), so writes from all processes are serial. This measures what that costs: W writer
processes (each its own Store, as app processes have), each a user of its own writing the two turns of a chat turn
(`store.turns.add` for the message, then for the reply) as fast as it can for `--seconds`. A row per store and
writer count: turns written per second in all, p50/p95/max latency of one write, errors.

A chat turn makes two or three writes and a session end a few more; divide to get chat turns per second. On SQLite,
the main process meanwhile times what an erasure does last, the WAL checkpoint that leaves no erased text in it.
With `--kind updates` each writer commits memory versions instead (`store.versions.commit`: a new version of 30
sentences with their 384-d vectors, its base compared with the latest in the same transaction), what a memory
update writes last: a row per store and writer count in memory updates per second.

    python benchmarks/store_writes.py                              # SQLite only: 1, 4, 16 writers
    pg_virtualenv sh -c 'python benchmarks/store_writes.py \\
        --pg "postgresql://$PGUSER:$PGPASSWORD@$PGHOST:$PGPORT/postgres"'   # and a throwaway Postgres beside it

    python benchmarks/store_writes.py --kind updates --writers 1,4   # memory updates' commits instead

With --pg the benchmark makes a schema of its own in that database and drops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory.store.connection import url_scheme  # noqa: E402

SENTENCES = 30  # sentences in each memory version an `--kind updates` writer commits (a grown memory)


def writer(
    target: str, number: int, rate: float, ready: Any, start: Any, stop_at: Any, out: Any, kind: str = "turns"
) -> None:
    from memory.store import Sentence, Store

    store = Store(target)
    try:
        user = store.users.get_or_create(f"writer-{number}")
        session = store.sessions.start(user, "keem", "bench")
        latencies: list[float] = []
        errors = 0
        base: int | None = None
        vectors = np.random.default_rng(number).standard_normal((SENTENCES, 384)).astype(np.float32)

        def update() -> None:  # a memory update's commit: a new version of SENTENCES sentences with their vectors
            nonlocal base
            said = [
                Sentence(
                    f"사용자는 {number}번 작가의 {i}번째 소설을 {len(latencies)}번 읽었다.",
                    embedding=v,
                    embedder="bench",
                )
                for i, v in enumerate(vectors)
            ]
            version = store.versions.commit(user, said, base=base, strategy="keem", status="ok", author="bench")
            base = version.number

        steps = (
            [update]
            if kind == "updates"
            else [
                lambda role=role: store.turns.add(
                    session, user, role, f"{role} {number} 오늘은 산책을 했어요 {len(latencies)}"
                )
                for role in ("user", "assistant")
            ]
        )
        ready.wait()
        start.wait()
        due = time.time()
        while time.time() < stop_at.value:
            if rate > 0:  # a chat turn (two writes) every 2 / rate seconds, an update every 1 / rate, not as fast
                due += len(steps) / rate
                time.sleep(max(0.0, due - time.time()))
            for step in steps:
                t0 = time.perf_counter()
                try:
                    step()
                except Exception:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)
        out.put((latencies, errors))
    finally:
        store.close()


def run(target: str, writers: int, seconds: float, rate: float = 0.0, kind: str = "turns") -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # no inherited connections or pool threads
    start = ctx.Event()
    stop_at = ctx.Value("d", 0.0)
    out = ctx.Queue()
    ready = ctx.Barrier(writers + 1)
    procs = [
        ctx.Process(target=writer, args=(target, i, rate, ready, start, stop_at, out, kind)) for i in range(writers)
    ]
    for p in procs:
        p.start()
    ready.wait(timeout=300)  # every process imported and opened its store (a busy machine takes a while)
    stop_at.value = time.time() + seconds
    start.set()
    emptied = checkpoints(target, stop_at.value) if not url_scheme(target) else None
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    ms = np.array([x for lat, _ in results for x in lat]) if results else np.zeros(0)
    return {
        "writers": writers,
        "rate": rate,
        "seconds": seconds,
        "writes": int(ms.size),
        "writes_per_s": ms.size / seconds,
        "p50_ms": float(np.percentile(ms, 50)) if ms.size else None,
        "p95_ms": float(np.percentile(ms, 95)) if ms.size else None,
        "max_ms": float(ms.max()) if ms.size else None,
        "errors": sum(e for _, e in results),
        **(emptied or {}),
    }


def checkpoints(target: str, until: float) -> dict[str, Any]:
    """While the writers write: what an erasure does last on SQLite (Store.checkpoint, the WAL emptied so no erased
    text stays in it), every 0.3 s, timed: how many emptied the WAL and how long one took."""
    from memory.store import Store

    store, took, emptied = Store(target), [], 0
    try:
        while time.time() < until - 0.5:
            started = time.perf_counter()
            emptied += store.checkpoint()
            took.append(time.perf_counter() - started)
            time.sleep(0.3)
    finally:
        store.close()
    return {
        "checkpoints": len(took),
        "checkpoints_emptied": emptied,
        "checkpoint_p50_s": float(np.median(took)) if took else None,
        "checkpoint_max_s": max(took) if took else None,
    }


class PostgresSchema:
    """A schema of this benchmark's own in the --pg database: its URL (search_path set) while open."""

    def __init__(self, url: str):
        import psycopg

        self.name = f"bench_{uuid.uuid4().hex[:10]}"
        self.admin = psycopg.connect(url, autocommit=True)
        self.admin.execute(f"create schema {self.name}")
        joiner = "&" if "?" in url else "?"
        self.url = f"{url}{joiner}options={quote(f'-csearch_path={self.name}', safe='')}"

    def close(self) -> None:
        self.admin.execute(f"drop schema {self.name} cascade")
        self.admin.close()


def checkpoint_lines(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"sqlite, {r['writers']} writers: an erasure's WAL checkpoint emptied it {r['checkpoints_emptied']} of "
        f"{r['checkpoints']} times, p50 {r['checkpoint_p50_s']:.2f} s, worst {r['checkpoint_max_s']:.2f} s"
        for r in rows
        if r.get("checkpoints")
    ]


# a table's columns: (title, the row's key, its format); the first column is aligned left, the others right
COLUMNS = [
    ("store", "store", ""),
    ("writers", "writers", ""),
    ("writes/s", "writes_per_s", ",.0f"),
    ("p50 ms", "p50_ms", ".2f"),
    ("p95 ms", "p95_ms", ".2f"),
    ("max ms", "max_ms", ".1f"),
    ("errors", "errors", ""),
]


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]] = COLUMNS) -> str:
    """Rows as a text table; a value that is missing (no write in a row) shows as '-'."""
    cells = [[title for title, _, _ in columns]]
    cells += [["-" if r.get(key) is None else format(r[key], spec) for _, key, spec in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [
        " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", default="1,4,16", help="writer processes per row, comma-separated (default 1,4,16)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds each row writes (default 5)")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="writes a second per writer (0, the default: as fast as it can; 1 is a busy chat user's pace)",
    )
    p.add_argument(
        "--kind",
        choices=("turns", "updates"),
        default="turns",
        help="what each writer writes: a chat turn's two turn rows (default), or a memory update's commit (a new "
        f"version of {SENTENCES} sentences with 384-d vectors, compared with the latest in the same transaction)",
    )
    p.add_argument("--pg", metavar="URL", help="also a Postgres database (postgresql://...): a throwaway schema in it")
    p.add_argument("--no-sqlite", action="store_true", help="Postgres only")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    args = p.parse_args(argv)
    counts = [int(w) for w in args.writers.split(",") if w.strip()]
    rows: list[dict[str, Any]] = []
    if not args.no_sqlite:
        for w in counts:
            with tempfile.TemporaryDirectory(prefix="keem-writes-") as tmp:
                target = str(Path(tmp) / "keem.db")
                rows.append({"store": "sqlite", **run(target, w, args.seconds, args.rate, args.kind)})
    if args.pg:
        for w in counts:
            schema = PostgresSchema(args.pg)
            try:
                rows.append({"store": "postgres", **run(schema.url, w, args.seconds, args.rate, args.kind)})
            finally:
                schema.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        pace = f"{args.rate:g} writes/s each" if args.rate > 0 else "as fast as each can"
        what = "turn writes" if args.kind == "turns" else f"memory version commits ({SENTENCES} sentences each)"
        print(f"{what} ({args.seconds:g} s a row, {pace}), one writer process per user, each its own store")
        print(table(rows))
        print("\n".join(checkpoint_lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
