"""The SQLite store (the source of truth): users, sessions, turns, memory versions with sentences, update jobs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from sqlite_utils import Database

from memory.migrations import migrations
from models.errors import InputError, MigrationError, StorageError, UnknownUserError, UpdateError


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _blob(vector: np.ndarray | None) -> bytes | None:
    """A vector as the float32 bytes stored beside its text."""
    return None if vector is None else np.asarray(vector, np.float32).tobytes()


def _vector(blob: bytes | None) -> np.ndarray | None:
    return np.frombuffer(blob, dtype=np.float32) if blob else None


@dataclass(frozen=True)
class Sentence:
    text: str
    provenance: str = "added"  # kept | added | rewritten | restored | imported | user | fallback
    origin_id: int | None = None  # the sentence of the previous version it continues, if any
    id: int | None = None
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)
    embedder: str | None = None
    cues: str | None = None  # words a later turn may use for it (memory/cues.py), when written
    cue_embedding: np.ndarray | None = field(default=None, compare=False, repr=False)  # same embedder as `embedding`


@dataclass(frozen=True)
class Version:
    id: int
    user_id: int
    number: int
    session_id: int | None
    strategy: str
    status: str  # ok | fallback | failed
    model_spec: str | None
    prompt_hash: str | None
    author: str  # updater | user | import
    note: str | None
    created_at: str
    sentences: tuple[Sentence, ...]
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.sentences]

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "created_at": self.created_at,
            "strategy": self.strategy,
            "status": self.status,
            "author": self.author,
            "session_id": self.session_id,
            "model": self.model_spec,
            "prompt_hash": self.prompt_hash,
            "note": self.note,
            "sentences": [
                {"id": s.id, "text": s.text, "provenance": s.provenance, **({"cues": s.cues} if s.cues else {})}
                for s in self.sentences
            ],
        }


JOB_STATUSES = ("pending", "running", "done", "failed")
LEASE_S = 900.0  # a running job's lease; every stage renews it. A job whose lease ran out is free to take again.


def process_owner() -> str:
    """This process, as a job's owner: host and pid (a dead pid on this host frees its jobs at once)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_is_dead(owner: str | None) -> bool:
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


def storage_error(path: str, exc: BaseException, flag: str = "--db (KEEM_DB)") -> StorageError:
    """What went wrong with the database file, in one line with the fix (`code` for the UI's translation); `flag`
    is the option that chose the place (the dataset builder's is --out)."""
    text = str(exc).lower()
    folder = Path(path).resolve().parent
    try:
        free = shutil.disk_usage(folder).free if folder.exists() else None
    except OSError:
        free = None
    if Path(path).is_dir():
        return StorageError(
            f"{path} is a folder, not a database file; point {flag} at a file such as {Path(path) / 'keem.db'}"
            if flag.startswith("--db")
            else f"{path} is a folder, not a database file; move it away or give another {flag}",
            code="storage_folder",
            path=path,
        )
    if "not a database" in text or "malformed" in text:
        return StorageError(
            f"{path} is not a keem database (SQLite says: {exc}); point {flag} at another "
            "file, or restore it from a backup",
            code="storage_not_sqlite",
            path=path,
        )
    if "full" in text or (isinstance(exc, OSError) and exc.errno == 28) or (free is not None and free < 256 * 1024):
        return StorageError(
            f"the disk holding {path} is full; free some space and try again (nothing already stored is lost)",
            code="storage_full",
            path=path,
        )
    if (
        "readonly" in text
        or "read-only" in text
        or isinstance(exc, PermissionError)
        or (folder.exists() and not os.access(folder, os.W_OK))
    ):
        return StorageError(
            f"{path} cannot be written (read-only file or folder); fix its permissions or point "
            f"{flag} at a writable place",
            code="storage_read_only",
            path=path,
        )
    return StorageError(
        f"cannot use the database {path} ({exc}); check the file and its folder, or point {flag} elsewhere",
        code="storage_other",
        path=path,
    )


class Store:
    """One SQLite file in WAL mode; safe to share between threads (one connection, one lock).

    SQLite and file-system errors become a StorageError that says what is wrong and how to fix it.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        try:
            self._open()
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(self.path, exc) from None

    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self.db = Database(conn)
        self.lock = threading.RLock()
        if self.path != ":memory:":
            self.db.enable_wal()
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA secure_delete=ON")  # a forgotten user's text is overwritten, not left in free pages
        self.forgotten = 0  # users deleted through this store (backups drop older snapshots)
        known = {m.name for m in migrations._migrations}
        applied = {m.name for m in migrations.applied(self.db)}
        if applied - known:
            raise MigrationError(
                f"database {self.path} was written by a newer keem (migrations {sorted(applied - known)}); "
                "upgrade keem-chat or point --db at another file"
            )
        try:
            migrations.apply(self.db)
        except sqlite3.Error as exc:
            raise MigrationError(f"migrating {self.path} failed ({exc}); restore a backup or use a new --db") from exc

    def close(self) -> None:
        self.db.conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction, taking SQLite's write lock up front (BEGIN IMMEDIATE).

        A deferred transaction that reads first and then writes can fail at once with "database is locked"
        when another process (the CLI beside the app) writes meanwhile; an immediate one waits its turn.
        Nested calls join the outer transaction.
        """
        with self.lock:
            if self.db.conn.in_transaction:
                yield
                return
            try:
                self.db.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                except BaseException:
                    self.db.conn.rollback()
                    raise
                self.db.conn.commit()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                    raise
                raise storage_error(self.path, exc) from None

    def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(r) for r in self.db.query(sql, params)]

    def _one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        """Insert one row (inside `write()`); its new integer id."""
        pk = self.db.table(table).insert(row).last_pk
        assert pk is not None, f"insert into {table} gave no row id"
        return int(pk)

    # -- users ---------------------------------------------------------------------------------
    def find_user(self, name: str) -> int | None:
        row = self._one("select id from users where name = ?", [name])
        return row["id"] if row else None

    def require_user(self, name: str) -> int:
        user_id = self.find_user(name)
        if user_id is None:
            raise UnknownUserError(f"no user '{name}' in this database; start one with: keem session --user {name}")
        return user_id

    def get_or_create_user(self, name: str) -> int:
        with self.write():
            user_id = self.find_user(name)
            if user_id is None:
                user_id = self._insert("users", {"name": name, "created_at": now_iso()})
            return int(user_id)

    def users(self) -> list[dict[str, Any]]:
        return self._rows("select * from users order by id")

    def user_overview(self) -> list[dict[str, Any]]:
        """Every user with their trial strategy, session and version counts and last session start."""
        return self._rows(
            "select u.name, u.created_at, u.strategy, "
            "(select count(*) from sessions s where s.user_id = u.id) as sessions, "
            "(select max(started_at) from sessions s where s.user_id = u.id) as last_session, "
            "(select count(*) from memory_versions v where v.user_id = u.id) as versions "
            "from users u order by u.id"
        )

    def assign_strategy(self, user_id: int, choices: Sequence[str]) -> str:
        """The user's trial strategy: the one assigned before, else the choice with the fewest users (first on ties)."""
        with self.write():
            row = self._one("select strategy from users where id = ?", [user_id])
            if row and row["strategy"] in choices:
                return str(row["strategy"])
            counts = {
                r["strategy"]: r["n"]
                for r in self._rows(
                    "select strategy, count(*) as n from users where strategy is not null group by strategy"
                )
            }
            chosen = min(choices, key=lambda c: counts.get(c, 0))
            self.db.execute("update users set strategy = ? where id = ?", [chosen, user_id])
            return chosen

    def delete_user(self, user_id: int) -> None:
        """Forget a user: every turn, session, memory version, sentence and job, in one transaction."""
        with self.write():
            for table in ("memory_sentences", "memory_versions", "update_jobs", "turns", "sessions"):
                self.db.execute(f"delete from {table} where user_id = ?", [user_id])
            self.db.execute("delete from users where id = ?", [user_id])
        self.forgotten += 1

    # -- sessions and turns ---------------------------------------------------------------------
    def start_session(self, user_id: int, strategy: str, chat_model: str) -> int:
        with self.write():
            return self._insert(
                "sessions",
                {
                    "user_id": user_id,
                    "started_at": now_iso(),
                    "strategy": strategy,
                    "chat_model": chat_model,
                    "status": "open",
                },
            )

    def end_session(self, session_id: int, reason: str = "user") -> None:
        with self.write():
            self.db.execute(
                "update sessions set status = 'ended', ended_at = ?, end_reason = ? where id = ? and status = 'open'",
                [now_iso(), reason, session_id],
            )

    def session(self, session_id: int) -> dict[str, Any]:
        row = self._one("select * from sessions where id = ?", [session_id])
        if row is None:
            raise InputError(f"no session {session_id}")
        return row

    def previous_session(self, user_id: int, session_id: int) -> dict[str, Any] | None:
        """The user's last session before this one that had turns."""
        return self._one(
            "select * from sessions s where user_id = ? and id < ? and exists "
            "(select 1 from turns t where t.session_id = s.id) order by id desc limit 1",
            [user_id, session_id],
        )

    def sessions(self, user_id: int) -> list[dict[str, Any]]:
        return self._rows("select * from sessions where user_id = ? order by id", [user_id])

    def open_sessions(self) -> list[dict[str, Any]]:
        return self._rows("select * from sessions where status = 'open' order by id")

    def add_turn(self, session_id: int, user_id: int, role: str, text: str) -> int:
        with self.write():
            return self._insert(
                "turns",
                {"session_id": session_id, "user_id": user_id, "role": role, "text": text, "created_at": now_iso()},
            )

    def turns(self, session_id: int) -> list[dict[str, Any]]:
        return self._rows("select * from turns where session_id = ? order by id", [session_id])

    # -- memory versions ------------------------------------------------------------------------
    def _version(self, row: dict[str, Any] | None) -> Version | None:
        if row is None:
            return None
        sentences = tuple(
            Sentence(
                text=s["text"],
                provenance=s["provenance"],
                origin_id=s["origin_id"],
                id=s["id"],
                embedder=s["embedder"],
                cues=s["cues"],
                embedding=_vector(s["embedding"]),
                cue_embedding=_vector(s["cue_embedding"]),
            )
            for s in self._rows("select * from memory_sentences where version_id = ? order by position", [row["id"]])
        )
        details = json.loads(row["details"]) if row.get("details") else {}
        return Version(
            id=row["id"],
            user_id=row["user_id"],
            number=row["number"],
            session_id=row["session_id"],
            strategy=row["strategy"],
            status=row["status"],
            model_spec=row["model_spec"],
            prompt_hash=row["prompt_hash"],
            author=row["author"],
            note=row["note"],
            created_at=row["created_at"],
            sentences=sentences,
            details=details,
        )

    def latest_version_id(self, user_id: int) -> int | None:
        row = self._one("select id from memory_versions where user_id = ? order by number desc limit 1", [user_id])
        return row["id"] if row else None

    def latest_version(self, user_id: int) -> Version | None:
        return self._version(
            self._one("select * from memory_versions where user_id = ? order by number desc limit 1", [user_id])
        )

    def version(self, user_id: int, number: int) -> Version:
        found = self._version(
            self._one("select * from memory_versions where user_id = ? and number = ?", [user_id, number])
        )
        if found is None:
            raise InputError(f"this user has no memory version {number}; see: keem memory history")
        return found

    def versions(self, user_id: int) -> list[Version]:
        rows = self._rows("select * from memory_versions where user_id = ? order by number", [user_id])
        return [v for v in (self._version(r) for r in rows) if v is not None]

    def commit_version(
        self,
        user_id: int,
        sentences: list[Sentence],
        *,
        strategy: str,
        status: str,
        author: str,
        session_id: int | None = None,
        model_spec: str | None = None,
        prompt_hash: str | None = None,
        note: str | None = None,
        details: dict[str, Any] | None = None,
        job_id: int | None = None,
    ) -> Version:
        """Write a new version with all its sentences in one transaction (and finish its job, if any).

        Refuses an empty memory: a version is never empty.
        """
        if not sentences or not all(s.text.strip() for s in sentences):
            raise UpdateError("refusing to commit an empty memory or an empty sentence; the previous version stays")
        with self.write():
            if job_id is not None:  # one version per session update: a job run twice commits once
                done = self._one("select version_id from update_jobs where id = ? and version_id is not null", [job_id])
                if done is not None:
                    existing = self._version(
                        self._one("select * from memory_versions where id = ?", [done["version_id"]])
                    )
                    if existing is not None:
                        return existing
            last = self._one("select max(number) as n from memory_versions where user_id = ?", [user_id])
            number = int((last or {}).get("n") or 0) + 1
            version_id = self._insert(
                "memory_versions",
                {
                    "user_id": user_id,
                    "number": number,
                    "session_id": session_id,
                    "strategy": strategy,
                    "status": status,
                    "model_spec": model_spec,
                    "prompt_hash": prompt_hash,
                    "author": author,
                    "note": note,
                    "details": json.dumps(details or {}, ensure_ascii=False),
                    "created_at": now_iso(),
                },
            )
            self.db.table("memory_sentences").insert_all(
                {
                    "version_id": version_id,
                    "user_id": user_id,
                    "position": i,
                    "text": s.text.strip(),
                    "embedding": _blob(s.embedding),
                    "embedder": s.embedder,
                    "provenance": s.provenance,
                    "origin_id": s.origin_id,
                    "cues": s.cues,
                    "cue_embedding": _blob(s.cue_embedding),
                }
                for i, s in enumerate(sentences)
            )
            if job_id is not None:
                self.db.execute(
                    "update update_jobs set status = 'done', stage = ?, version_id = ?, owner = null, "
                    "updated_at = ? where id = ?",
                    [status, version_id, now_iso(), job_id],
                )
        committed = self._version(self._one("select * from memory_versions where id = ?", [version_id]))
        assert committed is not None
        return committed

    # -- update jobs (a durable queue) ----------------------------------------------------------
    def enqueue_job(self, user_id: int, session_id: int, strategy: str) -> int:
        with self.write():
            existing = self._one("select id from update_jobs where session_id = ?", [session_id])
            if existing:
                return int(existing["id"])
            return self._insert(
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

    def job(self, job_id: int) -> dict[str, Any]:
        row = self._one("select * from update_jobs where id = ?", [job_id])
        if row is None:
            raise InputError(f"no update job {job_id}")
        return row

    def claim_job(
        self, job_id: int | None = None, owner: str | None = None, lease_s: float = LEASE_S
    ) -> dict[str, Any] | None:
        """Lease a job to `owner` (this process by default) and mark it running; None when none is free.

        The given job if it is pending, else the oldest pending job whose retry time has come. A job another
        process runs is never taken while its lease lasts; one whose lease ran out (its process died or hung)
        is taken again.
        """
        owner = owner or process_owner()
        now = time.time()
        with self.write():
            free = "(status = 'pending' or (status = 'running' and coalesce(lease_until, 0) < ?))"
            if job_id:
                row = self._one(f"select * from update_jobs where id = ? and {free}", [job_id, now])
            else:
                row = self._one(
                    f"select * from update_jobs where {free} and coalesce(next_attempt_at, 0) <= ? order by id limit 1",
                    [now, now],
                )
            if row is None:
                return None
            self.db.execute(
                "update update_jobs set status = 'running', attempts = attempts + 1, owner = ?, "
                "lease_until = ?, updated_at = ? where id = ?",
                [owner, now + lease_s, now_iso(), row["id"]],
            )
        return self.job(row["id"])

    def set_job_stage(self, job_id: int, stage: str, lease_s: float = LEASE_S) -> None:
        """Record the stage a running job reached, and renew its lease."""
        with self.write():
            self.db.execute(
                "update update_jobs set stage = ?, updated_at = ?, lease_until = ? where id = ?",
                [stage, now_iso(), time.time() + lease_s, job_id],
            )

    def finish_job_without_version(self, job_id: int, stage: str) -> None:
        with self.write():
            self.db.execute(
                "update update_jobs set status = 'done', stage = ?, owner = null, updated_at = ? where id = ?",
                [stage, now_iso(), job_id],
            )

    def fail_job(self, job_id: int, error: str, *, retry_in_s: float | None) -> None:
        """Record a failed attempt: pending again after `retry_in_s`, or (None) failed until an operator or the next
        start retries it. Either way the error stays on the job."""
        with self.write():
            self.db.execute(
                "update update_jobs set status = ?, stage = 'failed', last_error = ?, owner = null, "
                "lease_until = null, next_attempt_at = ?, updated_at = ? where id = ?",
                [
                    "failed" if retry_in_s is None else "pending",
                    error,
                    None if retry_in_s is None else time.time() + retry_in_s,
                    now_iso(),
                    job_id,
                ],
            )

    def retry_jobs(self, job_ids: list[int] | None = None, user_id: int | None = None) -> list[int]:
        """Failed jobs (these, or this user's, or all) back to pending now, with a fresh count of attempts."""
        with self.write():
            where, params = "status = 'failed'", []
            if job_ids:
                where += f" and id in ({','.join('?' * len(job_ids))})"
                params += job_ids
            if user_id is not None:
                where += " and user_id = ?"
                params.append(user_id)
            ids = [r["id"] for r in self._rows(f"select id from update_jobs where {where} order by id", params)]
            if ids:
                self.db.execute(
                    f"update update_jobs set status = 'pending', stage = 'queued', attempts = 0, "
                    f"next_attempt_at = null, updated_at = ? where id in ({','.join('?' * len(ids))})",
                    [now_iso(), *ids],
                )
        return ids

    def jobs(self, user_id: int | None = None, statuses: tuple[str, ...] = JOB_STATUSES) -> list[dict[str, Any]]:
        marks = ",".join("?" * len(statuses))
        if user_id is None:
            return self._rows(f"select * from update_jobs where status in ({marks}) order by id", list(statuses))
        return self._rows(
            f"select * from update_jobs where user_id = ? and status in ({marks}) order by id", [user_id, *statuses]
        )

    def requeue_running(self) -> int:
        """Running jobs whose process is gone (a dead pid on this host, or a lease that ran out) go back to pending;
        a job another live process runs is left alone. Returns how many went back."""
        now = time.time()
        with self.write():
            stale = [
                r["id"]
                for r in self._rows("select id, owner, lease_until from update_jobs where status = 'running'")
                if _owner_is_dead(r["owner"]) or (r["lease_until"] or 0) < now
            ]
            if stale:
                self.db.execute(
                    f"update update_jobs set status = 'pending', stage = 'queued', owner = null, "
                    f"lease_until = null, updated_at = ? where id in ({','.join('?' * len(stale))})",
                    [now_iso(), *stale],
                )
            return len(stale)

    # -- user trials: consent and questionnaire answers (chatbot/trials/study.py) ------------------------
    def record_consent(
        self, user_id: int, study_id: str, text_hash: str, at: datetime | str | None = None
    ) -> dict[str, Any]:
        """Record that the user agreed to this study's consent text (its hash); agreeing again to the same text
        keeps the first record. Returns the record."""
        if isinstance(at, datetime):
            at = (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
        when = at.isoformat(timespec="seconds") if isinstance(at, datetime) else (at or now_iso())
        same = "select * from consents where user_id = ? and study_id = ? and text_hash = ? order by id limit 1"
        with self.write():
            if self._one(same, [user_id, study_id, text_hash]) is None:
                self.db.execute(
                    "insert into consents (user_id, study_id, text_hash, created_at) values (?, ?, ?, ?)",
                    [user_id, study_id, text_hash, when],
                )
            row = self._one(same, [user_id, study_id, text_hash])
        assert row is not None
        return row

    def consent(self, user_id: int, study_id: str) -> dict[str, Any] | None:
        """The user's latest consent to this study (user_id, study_id, text_hash, created_at), or None."""
        return self._one(
            "select * from consents where user_id = ? and study_id = ? order by id desc limit 1", [user_id, study_id]
        )

    def save_answers(
        self, session_id: int, user_id: int, study_id: str, answers: dict[str, Any], check: Any = None
    ) -> int:
        """Store one session's questionnaire, all answers or none; returns how many were written.

        `check(answers) -> rows` (chatbot/trials/study.py: Study.check_answers) validates the answers against the study
        and returns rows of item, kind, question and value; it raises InputError naming the first bad answer.
        Without it, an int is a rating and a str a free text. A second submission for the same session is refused.
        """
        session = self._one("select user_id from sessions where id = ?", [session_id])
        if session is None or session["user_id"] != user_id:
            raise InputError(
                f"no session {session_id} of this participant; answer the questionnaire of one of their own sessions",
                code="questionnaire_no_session",
            )
        answered = "select 1 from answers where session_id = ? and study_id = ? limit 1"
        twice = InputError(
            "이미 응답한 설문입니다. 한 대화의 설문은 한 번만 제출할 수 있습니다.", code="questionnaire_done"
        )
        if self._one(answered, [session_id, study_id]):
            raise twice
        rows = (
            check(answers)
            if check
            else [
                {"item": k, "kind": "likert" if isinstance(v, int) else "text", "question": None, "value": v}
                for k, v in answers.items()
            ]
        )
        if not rows:
            raise InputError("설문에 답한 항목이 없습니다. 답을 고른 뒤 제출해 주세요.", code="questionnaire_empty")
        created = now_iso()
        with self.write():
            if self._one(answered, [session_id, study_id]):  # another tab submitted meanwhile
                raise twice
            for r in rows:
                self.db.execute(
                    "insert into answers (session_id, user_id, study_id, item, kind, question, value, "
                    "created_at) values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [session_id, user_id, study_id, r["item"], r["kind"], r.get("question"), str(r["value"]), created],
                )
        return len(rows)

    def answers(
        self, study_id: str | None = None, user_id: int | None = None, session_id: int | None = None
    ) -> list[dict[str, Any]]:
        """Stored questionnaire answers, filtered by any of study, user and session; ratings come back as int."""
        where, params = [], []
        for column, value in (("study_id", study_id), ("user_id", user_id), ("session_id", session_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        rows = self._rows(
            "select * from answers" + (" where " + " and ".join(where) if where else "") + " order by session_id, id",
            params,
        )
        for r in rows:
            if r["kind"] == "likert":
                r["value"] = int(r["value"])
        return rows

    def unanswered_sessions(self, user_id: int, study_id: str) -> list[dict[str, Any]]:
        """The user's ended sessions in which they said something and whose questionnaire for this study is
        still unanswered, oldest first."""
        return self._rows(
            "select * from sessions s where user_id = ? and status = 'ended' "
            "and exists (select 1 from turns t where t.session_id = s.id and t.role = 'user') "
            "and not exists (select 1 from answers a where a.session_id = s.id and a.study_id = ?) order by id",
            [user_id, study_id],
        )
