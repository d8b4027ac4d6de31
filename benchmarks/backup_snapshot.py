"""Database snapshots (memory/backup.py) while chat keeps writing: how long a snapshot takes and what it costs
the writes that happen meanwhile.

A store is filled with --turns turns of --chars characters each. A writer thread then adds one turn every 5 ms
through the store (as chat turns do) while a snapshot runs, two ways:
  own connection   Backups.snapshot: a read-only connection of its own copies the WAL database in one step
  store's lock     the alternative it replaced: the store's connection copies it while holding the store's lock
Printed: database size, snapshot seconds, and the latency of the writes made during the snapshot.

Usage: python benchmarks/backup_snapshot.py [--turns 200000] [--chars 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory.backup import Backups  # noqa: E402
from memory.store import Store, now_iso  # noqa: E402


def fill(store: Store, turns: int, chars: int) -> tuple[int, int]:
    user = store.users.get_or_create("bench")
    session = store.sessions.start(user, "keem", "bench")
    with store.write():
        store.db["turns"].insert_all(
            (
                {"session_id": session, "user_id": user, "role": "user", "text": "가" * chars, "created_at": now_iso()}
                for _ in range(turns)
            ),
            batch_size=10_000,
        )
    return user, session


def under_lock(store: Store, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    target = sqlite3.connect(folder / "locked.db")
    try:
        with store.lock:
            store.db.conn.backup(target)
    finally:
        target.close()


def measure(store: Store, user: int, session: int, snapshot: Callable[[], None]) -> dict[str, float]:
    latencies: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            store.turns.add(session, user, "user", "안녕")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.005)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.3)
    latencies.clear()  # only the writes made while the snapshot runs
    started = time.perf_counter()
    snapshot()
    seconds = time.perf_counter() - started
    stop.set()
    thread.join()
    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "snapshot_s": seconds,
        "writes": len(latencies),
        "write_p50_ms": float(np.percentile(ms, 50)),
        "write_max_ms": float(ms.max()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200_000)
    ap.add_argument("--chars", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "keem.db")
        user, session = fill(store, args.turns, args.chars)
        size_mb = os.path.getsize(store.path) / 1e6
        rows = {
            "own connection": measure(store, user, session, lambda: Backups(Path(tmp) / "b").snapshot(store)),
            "store's lock": measure(store, user, session, lambda: under_lock(store, Path(tmp) / "l")),
        }
        store.close()
    if args.json:
        print(json.dumps({"db_mb": size_mb, "turns": args.turns, "results": rows}, indent=1))
        return 0
    print(f"\ndatabase {size_mb:.0f} MB ({args.turns:,} turns)\n")
    print("| snapshot via | seconds | writes meanwhile | write p50 ms | write max ms |\n|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['snapshot_s']:.2f} | {r['writes']} | {r['write_p50_ms']:.1f} | {r['write_max_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
