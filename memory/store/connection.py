"""One SQLite file: opening it (WAL, pragmas), applying a numbered migration set, write transactions, and storage
errors that say how to fix them."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from models.errors import MigrationError, StorageError

log = logging.getLogger(__name__)


def placeholders(values: Sized) -> str:
    """'?,?,?': the parameters of an `in (...)` holding these values."""
    return ",".join("?" * len(values))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def storage_error(path: str, exc: BaseException, flag: str = "--db (KEEM_DB)") -> StorageError:
    """What went wrong with the database file, in one line with the fix (`code` for the UI's translation); `flag`
    is the option that chose the place (the dataset builder's is --out)."""
    text = str(exc).lower()
    # SQLite's own result code where Python gives it (3.11+); the message text only where it does not (3.10, OSError)
    primary = getattr(exc, "sqlite_errorcode", None)
    primary = primary & 0xFF if isinstance(primary, int) else None
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
    if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT) or (
        primary is None and ("not a database" in text or "malformed" in text)
    ):
        return StorageError(
            f"{path} is not a keem database (SQLite says: {exc}); point {flag} at another "
            "file, or restore it from a backup",
            code="storage_not_sqlite",
            path=path,
        )
    full = primary == sqlite3.SQLITE_FULL or (primary is None and "full" in text)
    full = full or (isinstance(exc, OSError) and exc.errno == 28)
    if full or (  # a nearly full disk is why a write failed, unless the folder cannot be written at all
        free is not None and free < 256 * 1024 and not (folder.exists() and not os.access(folder, os.W_OK))
    ):
        return StorageError(
            f"the disk holding {path} is full; free some space and try again (nothing already stored is lost)",
            code="storage_full",
            path=path,
        )
    if (
        primary == sqlite3.SQLITE_READONLY
        or (primary is None and ("readonly" in text or "read-only" in text))
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


class Schema:
    """A named set of numbered migrations (sqlite-utils `Migrations`) and the project's own list of their names.

    Register a migration with `@schema`; never edit one that shipped, add the next number. `retired` names
    migrations that once belonged to this set and moved to another (a database that ran them stays valid).
    """

    def __init__(self, name: str, retired: Sequence[str] = ()):
        self.migrations = Migrations(name)
        self.names: list[str] = []
        self.retired = tuple(retired)

    def __call__(self, fn: Callable[[Database], None]) -> Callable[[Database], None]:
        self.names.append(fn.__name__)
        return self.migrations(name=fn.__name__)(fn)

    def outside_transaction(self, fn: Callable[[Database], None]) -> Callable[[Database], None]:
        """Register a migration that runs its own transaction (a table rebuild turns foreign keys off, which SQLite
        allows only outside one). It must be safe to run again: a crash after its commit and before its record
        leaves it pending."""
        self.names.append(fn.__name__)
        return self.migrations(name=fn.__name__, transactional=False)(fn)

    def applied(self, db: Database) -> list[str]:
        """The names of this set's migrations the database has run, in the order it ran them."""
        return [m.name for m in self.migrations.applied(db)]

    def apply(self, db: Database, path: str) -> None:
        """Run the pending migrations; refuses a database a newer keem wrote (it ran migrations this one lacks)."""
        newer = set(self.applied(db)) - set(self.names) - set(self.retired)
        if newer:
            raise MigrationError(
                f"database {path} was written by a newer keem (migrations {sorted(newer)}); "
                "upgrade keem-chat or point --db at another file",
                code="migration_newer",
                path=path,
            )
        try:
            self.migrations.apply(db)
        except sqlite3.Error as exc:
            raise MigrationError(
                f"migrating {path} failed ({exc}); restore a backup or use a new --db",
                code="migration_failed",
                path=path,
            ) from exc


class Connection:
    """One SQLite file in WAL mode, migrated to `schema`; safe to share between threads (one connection, one lock).

    SQLite and file-system errors become a StorageError that says what is wrong and how to fix it.
    """

    def __init__(self, path: str | os.PathLike[str], schema: Schema):
        self.path = str(path)
        try:
            self._open()
            with self.lock:
                schema.apply(self.db, self.path)
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

    def checkpoint(self, attempts: int = 20) -> bool:
        """Copy the WAL into the file and empty it (TRUNCATE): after an erasure the WAL still holds the text, and
        `secure_delete`'s zeroed pages reach the file only here. Another connection reading at that moment (the CLI
        beside the app, a backup) holds it back, so it is retried for a few seconds; True when the WAL is empty."""
        if self.path == ":memory:":
            return True
        for attempt in range(attempts):
            with self.lock:
                if not self.db.conn.in_transaction:
                    busy = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                    if not busy:
                        return True
            time.sleep(0.05 * (attempt + 1))
        log.warning("the WAL of %s could not be emptied: another connection kept reading", self.path)
        return False

    def close(self) -> None:
        """Empty the WAL into the file (a clean shutdown leaves no erased text in it), then close."""
        with contextlib.suppress(sqlite3.Error):
            self.checkpoint(attempts=3)
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

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        """The rows a read query returns, as dicts."""
        with self.lock:
            return [dict(r) for r in self.db.query(sql, params)]

    def one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self.rows(sql, params)
        return rows[0] if rows else None

    def insert(self, table: str, row: dict[str, Any]) -> int:
        """Insert one row (inside `write()`); its new integer id."""
        pk = self.db.table(table).insert(row).last_pk
        assert pk is not None, f"insert into {table} gave no row id"
        return int(pk)
