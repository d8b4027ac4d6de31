"""`keem jobs list / retry`: the durable memory-update jobs, listed or run again."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

from chatbot.cli.options import (
    EMBEDDER,
    JSON,
    MODELS,
    STORE,
    USER_FILTER,
    add_command,
    add_group,
    open_store,
    print_json,
)
from chatbot.settings import Settings
from memory.words import plural
from models.errors import KeemError


def add_jobs_commands(subs: Any) -> None:
    """Register `keem jobs` and its commands."""
    jsubs = add_group(
        subs,
        "jobs",
        "list memory-update jobs, or retry failed ones",
        "Memory updates run as durable jobs. A failed one keeps its error and the previous memory; it is "
        "retried with backoff, at every start, or by `jobs retry`.",
        "keem jobs list --status failed",
    )
    p = add_command(
        jsubs,
        "list",
        "list update jobs with their status, attempts and last error",
        "keem jobs list --status failed --json",
        parents=[USER_FILTER, STORE, JSON],
        run=cmd_jobs_list,
    )
    p.add_argument(
        "--status",
        choices=["pending", "running", "done", "failed"],
        action="append",
        help="only jobs with this status (repeatable; default: all)",
    )
    p = add_command(
        jsubs,
        "retry",
        "run failed update jobs again now, also those waiting in a backoff (all, a user's, or the ones named)",
        "OPENAI_BASE_URL=http://127.0.0.1:8000/v1 keem jobs retry --user minsu --update-model openai:gpt-4o",
        parents=[USER_FILTER, STORE, MODELS, EMBEDDER],
        run=cmd_jobs_retry,
    )
    p.add_argument(
        "job", type=int, nargs="*", help="job ids (default: every failed job, and every one waiting in a backoff)"
    )
    p.add_argument(
        "--no-run",
        action="store_true",
        help="only put them back in the queue, for the running app to take (it polls every second)",
    )


JOB_FIELDS = (
    "id",
    "user",
    "session_id",
    "strategy",
    "status",
    "stage",
    "attempts",
    "last_error",
    "version_id",
    "takeovers",
    "taken_from",
    "updated_at",
)


def cmd_jobs_list(settings: Settings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    user_id = store.users.require(args.user) if args.user else None
    names = {u["id"]: u["name"] for u in store.users.all()}
    statuses = tuple(args.status) if args.status else ("pending", "running", "done", "failed")
    local = settings.local_time
    rows = [
        {
            **{k: job.get(k) for k in JOB_FIELDS},
            "user": names.get(job["user_id"]),
            "updated_at": local.iso(job["updated_at"]),
        }
        for job in store.queue.jobs(user_id, statuses)
    ]
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        error = f"  last error: {r['last_error']}" if r["last_error"] and r["status"] != "done" else ""
        print(
            f"job {r['id']}  {r['user']}  session {r['session_id']}  {r['strategy']}  {r['status']} ({r['stage']}), "
            f"{plural(r['attempts'], 'attempt')}{taken_over(r)}{error}"
        )
    if not rows:
        print("no update jobs")
    return 0


def taken_over(job: dict[str, Any]) -> str:
    """', taken over once from HOST:PID (its process was gone)': a job another worker took from one that was gone."""
    count = int(job.get("takeovers") or 0)
    if not count:
        return ""
    times = "once" if count == 1 else f"{count} times"
    return f", taken over {times} (last from {job['taken_from']})"


def _print_stage(job_id: int, stage: str) -> None:
    print(f"[job {job_id}: {stage}]", file=sys.stderr)


def cmd_jobs_retry(settings: Settings, args: argparse.Namespace) -> int:
    """Failed jobs (and jobs waiting in a backoff after a failure) back to the queue; then run them here with the
    update model (unless --no-run)."""
    store = open_store(settings)
    user_id = store.users.require(args.user) if args.user else None
    ids = store.queue.retry(args.job or None, user_id)
    if not ids:
        print("no failed update jobs to retry (none failed, none waiting in a backoff after a failure)")
        return 0
    if args.no_run:
        print(f"queued again: jobs {', '.join(map(str, ids))} (the running app takes them within a second)")
        return 0
    from chatbot.bot import load_bot
    from chatbot.cli.session import print_sentences
    from memory.backup import snapshot_if_configured

    store.close()
    bot = load_bot(settings)
    failed = 0
    for job_id in ids:
        try:
            version = bot.run_update(job_id, functools.partial(_print_stage, job_id))
        except KeemError as exc:
            failed += 1
            print(f"error: job {job_id} failed again and stays queued for retries ({exc})", file=sys.stderr)
            continue
        if version is None:
            print(f"job {job_id}: another process is running it, or it had nothing to update")
            continue
        print(f"job {job_id}: memory v{version.number} ({version.strategy}, {version.status})")
        print_sentences(version, settings.local_time.today())
    snapshot_if_configured(settings.backup_dir, bot.store)
    return 1 if failed else 0
