"""`keem worker`: a process that runs memory-update jobs only, beside app processes started with KEEM_WORKER=off."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from chatbot.cli.options import EMBEDDER, MODELS, STORE, UPDATES, add_command
from chatbot.settings import Settings
from memory.words import plural

EPILOG = """examples:
  keem worker --model demo                                 # beside `KEEM_WORKER=off keem chat` on the same --db
  OPENAI_BASE_URL=http://10.0.0.5:8000/v1 keem worker --update-model openai:gpt-4o --db /srv/keem/keem.db
  keem serve --processes 2 --workers 1                     # app processes, workers and HAProxy together"""


def add_worker_parser(subs: Any) -> argparse.ArgumentParser:
    """Register `keem worker` on the `keem` parser's subparsers."""
    p = add_command(
        subs,
        "worker",
        "run memory-update jobs only (any number of these, beside app processes with KEEM_WORKER=off)",
        EPILOG,
        description="Run the update jobs of every user from the store's durable queue until SIGTERM or Ctrl-C. "
        "Each job is leased (KEEM_JOB_LEASE_S, default 900 s, renewed at every stage): any number of workers share "
        "one store; a worker killed mid-update leaves its job to another, at once on this machine (its pid is "
        "gone) or when the lease runs out, and the job still commits one version. Sessions left open by an app "
        "process that died are ended after KEEM_IDLE_TIMEOUT_MIN and their updates run here.",
        parents=[STORE, MODELS, EMBEDDER, UPDATES],
        run=run_worker,
    )
    p.add_argument(
        "--grace-s",
        type=float,
        default=30.0,
        help="at SIGTERM, how long running jobs may take to finish before the process exits (default 30; a job "
        "cut short goes back to the queue at once, for the next worker here or on another machine)",
    )
    return p


def run_worker(settings: Settings, args: argparse.Namespace) -> int:
    """Load the update model and embedder, run jobs until SIGTERM/SIGINT, let running jobs finish, exit 0."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from chatbot.bot import load_bot
    from chatbot.stores import open_checked
    from chatbot.worker import Worker
    from memory.store.queue import process_owner

    # a store that cannot be used, or one a newer keem migrated: one line, exit 2, nothing written
    store = open_checked(settings.db_path, settings.backup_dir)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker = Worker(load_bot(settings, store), run_jobs=True, shared=True)
    worker.start()
    waiting = len(store.queue.jobs(statuses=("pending",)))
    print(
        f"keem worker {process_owner()}: running memory updates ({plural(waiting, 'job')} waiting); "
        "SIGTERM or Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    while not stop.wait(1.0):
        if not worker.alive:
            print("error: the worker thread stopped; see the log above", file=sys.stderr)
            return 1
    worker.stop(end_open=False, grace_s=args.grace_s)
    print("keem worker stopped", file=sys.stderr, flush=True)
    return 0
