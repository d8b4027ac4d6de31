"""What the HTTP API's rate limit costs a request, now that its counters are the store's (memory/store/tokens.py
`Tokens.take`: one upsert a request) and no longer a dict in the process.

P caller processes (each its own Store, as app processes have), each a caller of its own (an app token's user),
count requests as fast as they can for `--seconds`: counts per second in all and p50/p95/max of one. Beside them the
same statement in the store's ordinary write transaction (`store.write()`: on SQLite a commit that waits for the
disk, on Postgres under the store's write lock), which is what a count would cost without
`Connection.atomic_counter`, and a process-local dict with a lock (how the counters were kept before) for scale.
Postgres under pg_virtualenv runs with fsync off: its rows show round trips and locks, not the disk.

    python benchmarks/api_rate.py                                  # SQLite only: 1 and 4 processes
    pg_virtualenv -t sh -c 'python benchmarks/api_rate.py \\
        --pg "postgresql://$PGUSER:$PGPASSWORD@$PGHOST:$PGPORT/postgres"'   # and a throwaway Postgres beside it
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.store_writes import PostgresSchema, table  # noqa: E402

PER_MIN = 10**9  # nobody is refused: every request is counted the whole way


def in_write(store: Any, token: int, number: int) -> None:
    from memory.store.tokens import TAKE, caller_key

    now = time.time()
    with store.write():
        store.rows(TAKE, [token, caller_key(f"user-{number}"), now, now, 0.0, now, 0.0, now, now, 6e-8])


def caller(target: str, number: int, kind: str, ready: Any, start: Any, stop_at: Any, out: Any) -> None:
    from memory.store import Store

    store = Store(target)
    try:
        token = store.tokens.create(None, app=True, label=f"bench-{number}")[0].id
        lock, buckets = threading.Lock(), {}

        def local() -> None:  # the old in-process count, for scale
            with lock:
                left, when = buckets.get(number, (1.0, time.monotonic()))
                buckets[number] = (left, when)

        step = {
            "take": lambda: store.tokens.take(token, f"user-{number}", PER_MIN, time.time()),
            "write txn": lambda: in_write(store, token, number),
            "in process": local,
        }[kind]
        latencies: list[float] = []
        ready.wait()
        start.wait()
        while time.time() < stop_at.value:
            t0 = time.perf_counter()
            step()
            latencies.append((time.perf_counter() - t0) * 1e6)
        out.put(latencies)
    finally:
        store.close()


def run(target: str, kind: str, procs: int, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, start, stop_at, out = ctx.Barrier(procs + 1), ctx.Event(), ctx.Value("d", 0.0), ctx.Queue()
    workers = [ctx.Process(target=caller, args=(target, i, kind, ready, start, stop_at, out)) for i in range(procs)]
    for w in workers:
        w.start()
    ready.wait(timeout=120)  # imports done, stores opened
    stop_at.value = time.time() + seconds
    start.set()
    us = np.array([x for _ in workers for x in out.get(timeout=seconds + 120)])
    for w in workers:
        w.join(timeout=30)
    return {
        "kind": kind,
        "procs": procs,
        "per_s": us.size / seconds,
        "p50_us": float(np.percentile(us, 50)),
        "p95_us": float(np.percentile(us, 95)),
        "max_ms": float(us.max()) / 1000,
    }


COLUMNS = [
    ("store", "store", ""),
    ("count", "kind", ""),
    ("procs", "procs", ""),
    ("per s", "per_s", ",.0f"),
    ("p50 us", "p50_us", ",.0f"),
    ("p95 us", "p95_us", ",.0f"),
    ("max ms", "max_ms", ".1f"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", default="1,4", help="caller processes per row, comma-separated (default 1,4)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds each row counts (default 3)")
    p.add_argument("--pg", metavar="URL", help="also a Postgres database (postgresql://...): a throwaway schema in it")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.procs.split(",") if n.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="keem-rate-") as tmp:
        for kind in ("in process", "take", "write txn"):
            for n in counts:
                store = "(none)" if kind == "in process" else "sqlite"
                rows.append({"store": store, **run(str(Path(tmp) / f"{kind[0]}{n}.db"), kind, n, args.seconds)})
    if args.pg:
        for kind in ("take", "write txn"):
            for n in counts:
                schema = PostgresSchema(args.pg)
                try:
                    rows.append({"store": "postgres", **run(schema.url, kind, n, args.seconds)})
                finally:
                    schema.close()
    print(f"the API's rate count per request ({args.seconds:g} s a row, as fast as each process can)")
    print(table(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
