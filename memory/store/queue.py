"""The durable queue of memory-update jobs: enqueue, lease to one process, stages, backoff after a failure, retry."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from memory.store.connection import Connection, now_iso, placeholders
from models.errors import InputError, JobTakenError

JOB_STATUSES = ("pending", "running", "done", "failed")
# what `retry` takes: failed for good, or waiting in the backoff after a failed attempt (Queue.fail sets the stage)
RETRYABLE = "status = 'failed' or (status = 'pending' and stage = 'failed')"
LEASE_S = 900.0  # a running job's lease; every stage renews it. A job whose lease ran out is free to take again.
OWNED = "id = ? and status = 'running' and owner = ?"  # a job's runner writes only while the job is its own


def process_owner() -> str:
    """This process, as a job's owner: host and pid (a dead pid on this host frees its jobs at once)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str | None) -> bool:
    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's process: only its lease tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def taken_from(owner: str | None, why: str) -> str:
    """What a job records of the worker it was taken from: 'host:pid (why)'."""
    return f"{owner or 'an unknown worker'} ({why})"


def job_taken(conn: Connection, job_id: int) -> JobTakenError:
    """The error for a job that is no longer the caller's to write, saying where it went."""
    row = conn.one("select status, owner from update_jobs where id = ?", [job_id])
    if row is None:
        return JobTakenError(f"update job {job_id} is gone: its user was forgotten meanwhile; this copy writes nothing")
    return JobTakenError(
        f"update job {job_id} is no longer this process's (now {row['status']}, owner {row['owner'] or 'none'}): "
        "taken over when its lease ran out, or given back when its worker stopped; this copy writes nothing more"
    )


class Queue:
    """Update jobs, one per ended session; a job is leased to the process that runs it (memory/jobs.py)."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def enqueue(self, user_id: int, session_id: int, strategy: str) -> int:
        with self.conn.write():
            existing = self.conn.one("select id from update_jobs where session_id = ?", [session_id])
            if existing:
                return int(existing["id"])
            return self.conn.insert(
                "update_jobs",
                {
                    "user_id": user_id,
                    "session_id": session_id,
                    "strategy": strategy,
                    "status": "pending",
                    "stage": "queued",
                    "attempts": 0,
                    "created_at": now_iso(),
                    "updated_at": now_iso(),
                },
            )

    def get(self, job_id: int) -> dict[str, Any]:
        row = self.conn.one("select * from update_jobs where id = ?", [job_id])
        if row is None:
            raise InputError(f"no update job {job_id}")
        return row

    def claim(
        self, job_id: int | None = None, owner: str | None = None, lease_s: float = LEASE_S
    ) -> dict[str, Any] | None:
        """Lease a job to `owner` (this process by default) and mark it running; None when none is free.

        The given job if it is pending, else the oldest pending job whose retry time has come. A job another
        process runs is never taken while its lease lasts; one whose lease ran out (its process died or hung)
        is taken again.
        """
        owner = owner or process_owner()
        now = time.time()
        with self.conn.write():
            free = "(status = 'pending' or (status = 'running' and coalesce(lease_until, 0) < ?))"
            # On Postgres the row is locked for this transaction, and rows another transaction holds are skipped
            # (write() serialises writers already; this keeps two claimers apart even where a claim did not)
            lock = " for update skip locked" if self.conn.dialect == "postgres" else ""
            if job_id:
                row = self.conn.one(f"select * from update_jobs where id = ? and {free}{lock}", [job_id, now])
            else:
                row = self.conn.one(
                    f"select * from update_jobs where {free} and coalesce(next_attempt_at, 0) <= ? "
                    f"order by id limit 1{lock}",
                    [now, now],
                )
            if row is None:
                return None
            if row["status"] == "running":  # its worker's lease ran out: a takeover
                self.conn.execute(
                    "update update_jobs set takeovers = takeovers + 1, taken_from = ? where id = ?",
                    [taken_from(row["owner"], "its lease ran out"), row["id"]],
                )
            self.conn.execute(
                "update update_jobs set status = 'running', attempts = attempts + 1, owner = ?, "
                "lease_until = ?, updated_at = ? where id = ?",
                [owner, now + lease_s, now_iso(), row["id"]],
            )
        return self.get(row["id"])

    def _update_owned(self, sets: str, params: list[Any], job_id: int, owner: str | None) -> bool:
        """One update of a job while `owner` (this process by default) runs it (OWNED), inside the caller's
        `write()`; False, and nothing changed, when it does not (taken over, given back, finished or gone)."""
        return bool(
            self.conn.execute(
                f"update update_jobs set {sets} where {OWNED}", [*params, job_id, owner or process_owner()]
            )
        )

    def set_stage(self, job_id: int, stage: str, lease_s: float = LEASE_S, owner: str | None = None) -> None:
        """Record the stage a running job reached, and renew its lease: only while `owner` (this process by default)
        holds it. A job taken over, finished or gone meanwhile raises JobTakenError and is left as it is."""
        with self.conn.write():
            if not self._update_owned(
                "stage = ?, updated_at = ?, lease_until = ?", [stage, now_iso(), time.time() + lease_s], job_id, owner
            ):
                raise job_taken(self.conn, job_id)

    def finish_without_version(self, job_id: int, stage: str, owner: str | None = None) -> None:
        """Mark a running job of `owner`'s done with no version (nothing to update); JobTakenError if not its."""
        with self.conn.write():
            if not self._update_owned(
                "status = 'done', stage = ?, owner = null, updated_at = ?", [stage, now_iso()], job_id, owner
            ):
                raise job_taken(self.conn, job_id)

    def fail(self, job_id: int, error: str, *, retry_in_s: float | None, owner: str | None = None) -> bool:
        """Record a failed attempt: pending again after `retry_in_s`, or (None) failed until an operator or the next
        start retries it. Either way the error stays on the job. Only a job `owner` (this process by default) still
        runs: False, and nothing written, when it was taken over or finished meanwhile (its failure is this copy's,
        not the job's)."""
        with self.conn.write():
            return self._update_owned(
                "status = ?, stage = 'failed', last_error = ?, owner = null, lease_until = null, "
                "next_attempt_at = ?, updated_at = ?",
                [
                    "failed" if retry_in_s is None else "pending",
                    error,
                    None if retry_in_s is None else time.time() + retry_in_s,
                    now_iso(),
                ],
                job_id,
                owner,
            )

    def release(self, job_id: int, owner: str | None = None) -> bool:
        """A running job of `owner`'s (this process by default) back to pending now, its worker stopping before the
        job ended: the next worker takes it at once, not when its lease runs out (on another machine no dead pid
        tells). Counted as a takeover from `owner`. The copy still running writes nothing more for it (OWNED). False
        when the job was not `owner`'s running job."""
        owner = owner or process_owner()
        with self.conn.write():
            return self._update_owned(
                "status = 'pending', stage = 'queued', owner = null, lease_until = null, takeovers = takeovers + 1, "
                "taken_from = ?, updated_at = ?",
                [taken_from(owner, "its worker stopped before it ended"), now_iso()],
                job_id,
                owner,
            )

    def retry(self, job_ids: list[int] | None = None, user_id: int | None = None, *, backoff: bool = True) -> list[int]:
        """Failed jobs (these, or this user's, or all) back to pending now, with a fresh count of attempts: the ones
        failed for good and (`backoff`) the ones waiting in their backoff after a failed attempt."""
        with self.conn.write():
            where, params = (f"({RETRYABLE})" if backoff else "status = 'failed'"), []
            if job_ids:
                where += f" and id in ({placeholders(job_ids)})"
                params += job_ids
            if user_id is not None:
                where += " and user_id = ?"
                params.append(user_id)
            ids = [r["id"] for r in self.conn.rows(f"select id from update_jobs where {where} order by id", params)]
            if ids:
                self.conn.execute(
                    f"update update_jobs set status = 'pending', stage = 'queued', attempts = 0, "
                    f"next_attempt_at = null, updated_at = ? where id in ({placeholders(ids)})",
                    [now_iso(), *ids],
                )
        return ids

    @staticmethod
    def retryable(job: dict[str, Any]) -> bool:
        """Whether `retry` takes this job: failed for good, or waiting in its backoff after a failed attempt."""
        return job["status"] == "failed" or (job["status"] == "pending" and job["stage"] == "failed")

    def jobs(self, user_id: int | None = None, statuses: tuple[str, ...] = JOB_STATUSES) -> list[dict[str, Any]]:
        marks = placeholders(statuses)
        if user_id is None:
            return self.conn.rows(f"select * from update_jobs where status in ({marks}) order by id", list(statuses))
        return self.conn.rows(
            f"select * from update_jobs where user_id = ? and status in ({marks}) order by id", [user_id, *statuses]
        )

    def requeue_running(self) -> int:
        """Running jobs whose process is gone (a dead pid on this host, or a lease that ran out) go back to pending,
        each counting a takeover and whom it was taken from; a job another live process runs is left alone. Returns
        how many went back."""
        now = time.time()
        with self.conn.write():
            stale = []
            for r in self.conn.rows("select id, owner, lease_until from update_jobs where status = 'running'"):
                if owner_is_dead(r["owner"]):
                    stale.append((r["id"], taken_from(r["owner"], "its process was gone")))
                elif (r["lease_until"] or 0) < now:
                    stale.append((r["id"], taken_from(r["owner"], "its lease ran out")))
            for job_id, source in stale:
                self.conn.execute(
                    "update update_jobs set status = 'pending', stage = 'queued', owner = null, lease_until = null, "
                    "takeovers = takeovers + 1, taken_from = ?, updated_at = ? where id = ?",
                    [source, now_iso(), job_id],
                )
            return len(stale)
