"""The store's database: a SQLite file (the default) or a Postgres database (a postgresql:// URL in --db / KEEM_DB,
memory/store/postgres.py). Opening it, applying a numbered migration set, write transactions, the portable query
calls every part of the store uses (`rows`, `one`, `execute`, `insert`, `insert_many`, `write`), and storage errors
that say how to fix them.

Queries are written once, in the SQL both engines share, with `?` placeholders (Postgres gets them translated). An
upsert is `insert ... on conflict (...) do update set x = excluded.x` (both engines); a new row's id comes from
`insert()`. Nothing outside this module and the SQLite migrations touches the driver (`db`, `total_changes`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database

from memory.store.schema import Schema
from models.errors import MigrationError, StorageError

if TYPE_CHECKING:
    from memory.store.postgres import Postgres

log = logging.getLogger(__name__)


FIRST_OPEN_TRIES = 10  # opening a new SQLite file that other processes open at the same moment
BUSY_TIMEOUT = 30.0  # seconds a SQLite statement, and a write waiting for the write lock, waits before "locked"
LOCK_SLEEP = (0.0002, 0.002)  # a write's first sleeps between tries for SQLite's write lock: random in this range
LOCK_SLEEP_CAP = 0.008  # ... growing by a tenth a try up to this, so a long wait polls at ~125 Hz, not faster


def placeholders(values: Sized) -> str:
    """'?,?,?': the parameters of an `in (...)` holding these values."""
    return ",".join("?" * len(values))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# a database URL missing its // (postgresql:/x, sqlite:keem.db) is still a URL, never a file or folder name
DATABASE_LIKE = re.compile(r"^((postgres(ql)?|mysql|mariadb|sqlite3?|mssql|oracle)(\+[A-Za-z0-9]+)?):", re.IGNORECASE)


def url_scheme(target: str | os.PathLike[str]) -> str | None:
    """The scheme of `target` when it is a URL (postgresql://...) or looks like a database URL, None for a file
    path."""
    found = URL.match(str(target)) or DATABASE_LIKE.match(str(target))
    return found.group(1).lower() if found else None


def describe(target: str | os.PathLike[str]) -> str:
    """`target` as it may be shown or logged: a URL without its password."""
    if url_scheme(target):
        from memory.store.postgres import redact

        return redact(str(target))
    return str(target)


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


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the lock this statement needs ("database is locked")."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+; the message text before
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "database is locked" in str(exc).lower()


class Connection:
    """The store's database, migrated to `schema`: a SQLite file in WAL mode (one connection, one lock) or, for a
    postgresql:// URL, a Postgres database (a pool; memory/store/postgres.py). Safe to share between threads.

    Errors of either engine, and of the file system, become a StorageError that says what is wrong and how to fix
    it; a URL's password never appears in `path`, a log line or an error.
    """

    def __init__(self, path: str | os.PathLike[str], schema: Schema):
        scheme = url_scheme(path)
        self.pg: Postgres | None = None
        self.lock = threading.RLock()
        if scheme is not None:
            self.path = describe(path)
            self.dialect = "postgres"
            self._open_postgres(str(path), scheme, schema)
            return
        self.path = str(path)
        self.dialect = "sqlite"
        for attempt in range(FIRST_OPEN_TRIES):
            try:
                self._open()
                with self.lock:
                    schema.apply(self.db, self.path)
                return
            except (sqlite3.Error, OSError, MigrationError) as exc:
                cause = exc.__cause__ if isinstance(exc, MigrationError) else exc
                if hasattr(self, "db"):
                    self.db.conn.close()
                # processes opening one new file at once: one switches it to WAL or creates the migrations' own
                # table while another does ("database is locked", "already exists"); open again, which skips
                # what the other did
                racing = cause is not None and any(w in str(cause).lower() for w in ("locked", "already exists"))
                if racing and attempt < FIRST_OPEN_TRIES - 1:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                if isinstance(exc, MigrationError):
                    raise
                raise storage_error(self.path, exc) from None

    if not TYPE_CHECKING:  # hidden from mypy, which would otherwise accept any attribute of a store

        def __getattr__(self, name: str) -> Any:
            if name == "db" and self.__dict__.get("pg") is not None:  # reached only when `db` is absent: Postgres
                raise AttributeError(
                    "store.db is the SQLite driver and this store is Postgres; use store.rows/one/execute/insert/"
                    "insert_many inside store.write() (memory/store/connection.py)"
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _open_postgres(self, url: str, scheme: str, schema: Schema) -> None:
        from memory.store.postgres import SCHEMES, Postgres

        if not URL.match(url):  # not even a URL: show none of it (what follows the scheme may be a password)
            self.path = f"{scheme}:..."
            raise StorageError(
                f"--db (KEEM_DB) begins with '{scheme}:' but is not a database URL; give a SQLite file path, or a "
                "Postgres URL such as postgresql://user@host:5432/keem",
                code="storage_scheme",
                path=self.path,
            )
        if scheme not in SCHEMES:
            raise StorageError(
                f"--db (KEEM_DB) {self.path} names a database kind keem cannot use ({scheme}://); give a SQLite file "
                "path, or a Postgres URL such as postgresql://user@host:5432/keem",
                code="storage_scheme",
                path=self.path,
            )
        self.pg = Postgres(url)
        try:
            self.pg.migrate(schema)
        except BaseException:
            self.pg.close()
            raise

    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=BUSY_TIMEOUT)
        self.db = Database(conn)
        if self.path != ":memory:":
            self.db.enable_wal()
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA secure_delete=ON")  # a forgotten user's text is overwritten, not left in free pages

    def migrate(self, schema: Schema) -> None:
        """Apply another migration set to this database (chatbot/study_records.py's), on either engine."""
        if self.pg is not None:
            self.pg.migrate(schema)
            return
        try:
            with self.lock:
                schema.apply(self.db, self.path)
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(self.path, exc) from None

    def refuse_newer(self, schema: Schema) -> None:
        """Raise MigrationError (migration_newer) when a newer keem ran migrations of `schema` that this code lacks,
        without applying anything: a process that migrates a set only later (the trial records, at a trial's first
        rule) checks it at start, before it writes."""
        if self.pg is not None:
            self.pg.refuse_newer(schema)
            return
        try:
            with self.lock:
                schema.refuse_newer(self.db, self.path)
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(self.path, exc) from None

    def applied(self, schema: Schema) -> list[str]:
        """The names of `schema`'s migrations this database ran (of its engine's set)."""
        if self.pg is not None:
            return self.pg.applied(schema.name)
        with self.lock:
            return schema.applied(self.db)

    @property
    def changes(self) -> int:
        """A number that grows with every write through this store (the backup loop's "anything new?")."""
        if self.pg is not None:
            return self.pg.commits
        return int(self.db.conn.total_changes)

    def checkpoint(self, attempts: int = 20) -> bool:
        """Copy the WAL into the file and empty it (TRUNCATE): after an erasure the WAL still holds the text, and
        `secure_delete`'s zeroed pages reach the file only here. Another connection reading at that moment (the CLI
        beside the app, a backup) holds it back, so it is retried for a few seconds; True when the WAL is empty.
        On Postgres: nothing to do here (see `after_erasure`)."""
        if self.path == ":memory:" or self.pg is not None:
            return True

        def once() -> bool:
            with self.lock:
                if self.db.conn.in_transaction:
                    return False
                with self._not_waiting() as conn:
                    try:
                        return not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                    except sqlite3.OperationalError as exc:
                        if is_busy(exc):
                            return False
                        raise

        # tried without waiting every few ms, as a write takes its lock (`_polling`): SQLite's busy handler would
        # sleep up to 100 ms a try while other processes write back to back (docs/scaling.md)
        if self._polling(once, sum(0.05 * (a + 1) for a in range(attempts))):
            return True
        log.warning("the WAL of %s could not be emptied: another connection kept reading", self.path)
        return False

    def after_erasure(self, tables: Sequence[str]) -> bool:
        """What makes an erasure's deleted text leave the engine's files: SQLite's WAL checkpoint (secure_delete
        zeroed the pages already); Postgres's VACUUM FULL of the touched tables and a CHECKPOINT where permitted
        (docs/postgres.md says what Postgres still keeps for a while)."""
        if self.pg is not None:
            return self.pg.vacuum(tables)
        return self.checkpoint()

    def close(self) -> None:
        """Empty the WAL into the file (a clean shutdown leaves no erased text in it), then close. Under the lock: a
        thread still reading or writing (an update a shutdown did not wait for) finishes its statement first and
        gets an error at its next one; SQLite closed beneath a running statement crashes the process."""
        if self.pg is not None:
            self.pg.close()
            return
        with contextlib.suppress(sqlite3.Error):
            self.checkpoint(attempts=3)
        with self.lock:
            self.db.conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction, serialised with every other writer of the database, in any process: SQLite takes
        its write lock up front (BEGIN IMMEDIATE), Postgres a transaction-level advisory lock. A read-then-write
        inside it (compare-and-swap, a lease, a study rule) sees every earlier commit and nothing slips between.

        A deferred SQLite transaction that reads first and then writes can fail at once with "database is locked"
        when another process (the CLI beside the app) writes meanwhile; an immediate one waits its turn.
        Nested calls join the outer transaction.
        """
        if self.pg is not None:
            with self.pg.write():
                yield
            return
        with self.lock:
            if self.db.conn.in_transaction:
                yield
                return
            try:
                self._begin_immediate()
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

    def _begin_immediate(self) -> None:
        """BEGIN IMMEDIATE, waiting for SQLite's write lock with short random sleeps of our own instead of SQLite's
        busy handler, up to BUSY_TIMEOUT seconds; then a StorageError (storage_busy) saying what holds the lock, so
        a caller gets "try again" in its own language, never SQLite's bare "database is locked".

        Why: the busy handler sleeps 1, 2, 5, 10, ... then 100 ms a try, so while other processes write back to
        back a waiting writer sleeps through many of their writes and can wait seconds (3-5 s for one write among
        4 or 16 writer processes). Short random sleeps give the waiters a fair chance at each release: the worst
        wait fell to 0.25-0.5 s as fast as they can, to tens of ms at a chat's pace (docs/scaling.md, "Writes with
        many writers"). A lock file with blocking flock() queued better still but needs a file beside the
        database and cannot give up after a deadline without polling too. Only this statement and the erasure's
        checkpoint wait this way; every other one keeps the busy timeout (a read during WAL recovery, say). Runs
        under `self.lock`.
        """
        busy: list[sqlite3.OperationalError] = []

        def begin() -> bool:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                busy[:] = [exc]
                return False

        with self._not_waiting() as conn:
            if not self._polling(begin, BUSY_TIMEOUT):
                raise StorageError(
                    f"waited {BUSY_TIMEOUT:g} s for the write lock of {self.path}; another process"
                    " keeps a write transaction open (a stuck keem process, or a tool such as the sqlite3 "
                    "shell inside BEGIN); end it and try again (this write stored nothing)",
                    code="storage_busy",
                    path=self.path,
                ) from busy[-1]

    @contextlib.contextmanager
    def _not_waiting(self) -> Iterator[sqlite3.Connection]:
        """The SQLite connection with its busy timeout off (a statement that finds a lock taken fails at once with
        SQLITE_BUSY), put back to BUSY_TIMEOUT after. Call it holding `self.lock`."""
        conn = self.db.conn
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            yield conn
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")

    @staticmethod
    def _polling(attempt: Callable[[], bool], wait_s: float) -> bool:
        """`attempt` (True: done) tried again after short random sleeps (LOCK_SLEEP, growing by a tenth a try up to
        LOCK_SLEEP_CAP) until it is done or `wait_s` seconds pass (False): a fair chance at each release of a lock
        that other processes take back to back."""
        deadline = time.monotonic() + wait_s
        sleep = LOCK_SLEEP[1]
        while not attempt():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, random.uniform(LOCK_SLEEP[0], sleep)))
            sleep = min(sleep * 1.1, LOCK_SLEEP_CAP)
        return True

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        """The rows a read query returns, as dicts."""
        if self.pg is not None:
            return self.pg.rows(sql, params)
        with self.lock:
            return [dict(r) for r in self.db.query(sql, params)]

    def one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self.rows(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Any = ()) -> int:
        """Run a statement that writes (inside `write()`); how many rows it changed (cascades not counted)."""
        if self.pg is not None:
            return self.pg.execute(sql, params)
        with self.lock:
            return int(self.db.execute(sql, params).rowcount)

    def atomic_counter(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        """One statement that bumps a counter, atomic by itself (an upsert that reads nothing else), with the rows it
        returns (`returning ...`), for counters that may lose their last changes to a power cut or an OS crash,
        never to a crash of a process (the API's rate counts, memory/store/tokens.py: a lost count lets a caller in
        a little early). On SQLite in a write transaction of its own that does not wait for the disk
        (synchronous=NORMAL: the WAL is synced at the next ordinary commit or checkpoint); on Postgres on its own
        (autocommit: the statement locks the rows it changes; the table is UNLOGGED, so no WAL flush either),
        without the store's write lock, which serialises read-then-write transactions and costs four more round
        trips. Inside a write() it joins it."""
        if self.pg is not None:
            return self.pg.rows(sql, params)
        with self.lock:
            if self.db.conn.in_transaction:
                return self.rows(sql, params)
            synchronous = self.db.conn.execute("PRAGMA synchronous").fetchone()[0]
            self.db.conn.execute("PRAGMA synchronous = NORMAL")
            try:
                with self.write():
                    return self.rows(sql, params)
            finally:
                self.db.conn.execute(f"PRAGMA synchronous = {int(synchronous)}")

    def insert(self, table: str, row: dict[str, Any]) -> int:
        """Insert one row (inside `write()`); its new integer id."""
        if self.pg is not None:
            return self.pg.insert(table, row)
        with self.lock:
            pk = self.db.table(table).insert(row).last_pk
        assert pk is not None, f"insert into {table} gave no row id"
        return int(pk)

    def insert_many(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Insert rows that all have the same keys (inside `write()`)."""
        rows = list(rows)
        if not rows:
            return
        if self.pg is not None:
            self.pg.insert_many(table, rows)
            return
        columns = list(rows[0])
        with self.lock:
            self.db.conn.executemany(
                f"insert into {table} ({', '.join(columns)}) values ({placeholders(columns)})",
                [[r.get(c) for c in columns] for r in rows],
            )

    def notify(self, channel: str, payload: str = "") -> None:
        """Tell other processes something changed (a user forgotten, a new memory version) so they evict caches
        early: NOTIFY on Postgres, sent when the surrounding write() commits; nothing on SQLite. Only a hint:
        correctness stays with the version and data_generation checks every read makes."""
        if self.pg is not None:
            self.pg.notify(channel, payload)

    def listen(
        self, channels: Sequence[str], timeout: float | None = None, running: Callable[[], bool] | None = None
    ) -> Iterator[tuple[str, str]]:
        """(channel, payload) of each `notify` on these channels from any process, until `timeout` seconds pass
        with none (None: forever), or with `running` until it says False (asked every `timeout` seconds; one
        connection listens throughout). On SQLite nothing ever arrives: it waits the same way and ends, so one
        loop serves both engines (`for channel, payload in store.listen(["keem_users"], 1.0, running): ...`)."""
        if self.pg is not None:
            yield from self.pg.listen(channels, timeout, running)
            return
        time.sleep(timeout if timeout is not None else 0)
        while running is not None and running():
            time.sleep(timeout if timeout is not None else 1.0)

    def tables_with(self, column: str) -> list[str]:
        """The tables that have a column of this name (the erasure's count of a user's rows in every table)."""
        if self.pg is not None:
            return self.pg.tables_with(column)
        with self.lock:
            return sorted(t for t in self.db.table_names() if column in {c.name for c in self.db.table(t).columns})
