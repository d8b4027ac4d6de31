"""The store on Postgres: a connection pool (psycopg 3), the store's `?` queries translated, write transactions as
serial as SQLite's, numbered migrations of its own, and VACUUM after an erasure (docs/postgres.md says why).

Only connection.py uses this module, when --db (KEEM_DB) is a postgresql:// URL; the rest of the store writes one
query per operation and never knows which engine runs it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from memory.store.schema import newer_error
from models.errors import MigrationError, StorageError

if TYPE_CHECKING:
    from memory.store.schema import Schema

log = logging.getLogger(__name__)

SCHEMES = ("postgresql", "postgres")
# pg_advisory_xact_lock keys (any two constants no other program on the database uses): every write transaction
# takes WRITE_LOCK, the migrations MIGRATE_LOCK. Held until commit or rollback, released by Postgres if we die.
WRITE_LOCK = 0x6B65656D_5752  # "keem" "WR"
MIGRATE_LOCK = 0x6B65656D_4D47  # "keem" "MG"
CONNECT_TIMEOUT_S = 5
WRITE_WAIT_S = 30  # the longest a write waits for the other writers (SQLite's busy timeout is the same)
# A writer that stops inside its transaction this long (a process paused by SIGSTOP or a debugger, a frozen VM: alive,
# so its connection stays open) is cut off by the server, which rolls it back and frees the write lock for everyone
# else, well before their WRITE_WAIT_S: a worker stopped while renewing its job's lease held every writer of the
# database (app processes, the worker that was to take its job over) until it woke. A write transaction is a few
# statements with Python between them: milliseconds.
STALLED_WRITER_S = 10
LOCK_TIMEOUT_S = 5  # the longest an erasure's VACUUM FULL waits for a table's readers before plain VACUUM
FIX = (
    "start the server or fix the host, port, user, password or database name in --db (KEEM_DB); "
    "leave KEEM_DB empty for the local SQLite file"
)


def redact(url: str) -> str:
    """The URL with its password replaced by ***, for paths, log lines and errors (query options like
    `password=` too)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^@/]*@", "//***@", url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _skip_quoted(sql: str) -> Iterator[tuple[bool, str]]:
    """(quoted, piece) pieces of `sql`: string literals and quoted identifiers apart from the rest."""
    for piece in re.split(r"('(?:[^']|'')*'|\"[^\"]*\")", sql):
        if piece:
            yield piece[0] in "'\"", piece


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A store query in psycopg's dialect: `?` placeholders become %s, a literal % becomes %% (outside quotes the
    only change; inside string literals only % is doubled, as psycopg reads it there too)."""
    out = []
    for quoted, piece in _skip_quoted(sql):
        piece = piece.replace("%", "%%")
        out.append(piece if quoted else piece.replace("?", "%s"))
    return "".join(out)


def _import() -> tuple[Any, Any, Any]:
    try:
        import psycopg
        import psycopg_pool
        from psycopg.rows import dict_row
    except ImportError:
        raise StorageError(
            "a postgresql:// database needs psycopg and psycopg-pool: pip install 'psycopg[binary]' psycopg-pool",
            code="storage_postgres",
        ) from None
    return psycopg, psycopg_pool, dict_row


class Postgres:
    """One Postgres database through a pool of connections, shared by the threads of a process.

    A write transaction (`write()`) holds one pooled connection for its thread, so the queries inside it, and nested
    `write()`s, run in it; a query outside one borrows a connection for itself (autocommit).
    """

    dialect = "postgres"

    def __init__(self, url: str, max_size: int | None = None):
        psycopg, pool_module, dict_row = _import()
        self.psycopg = psycopg
        self.url, self.label = url, redact(url)
        try:  # one direct connection first: its error says why (refused, no such database, wrong password)
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg.Error as exc:
            raise self.error(exc, "cannot reach the Postgres database") from None
        size = max_size or int(os.environ.get("KEEM_PG_POOL", "8"))
        self.pool = pool_module.ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, size),
            kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": CONNECT_TIMEOUT_S},
            name="keem",
            open=True,
        )
        self.local = threading.local()
        self.commits = 0  # write transactions this process committed (Connection.changes)

    def error(self, exc: BaseException, what: str = "the Postgres database failed") -> StorageError:
        """One line with the fix; the URL's password never appears (psycopg's message is redacted too)."""
        reason = " ".join(str(exc).split()) or type(exc).__name__
        reason = reason.replace(self.url, self.label)
        password = urlsplit(self.url).password
        if password and len(password) >= 4:  # libpq never echoes it; this is a second guard, not the first
            reason = reason.replace(password, "***")
        return StorageError(f"{what} {self.label} ({reason}); {FIX}", code="storage_postgres", path=self.label)

    # -- connections and transactions -------------------------------------------------------------------
    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        held = getattr(self.local, "conn", None)
        if held is not None:
            yield held
            return
        try:
            with self.pool.connection() as conn:
                yield conn
        except self.psycopg.OperationalError as exc:
            raise self.error(exc) from None

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """One transaction that waits for every other writer of the database (any process) to finish first: the
        same serial order as SQLite's BEGIN IMMEDIATE, so a read-then-write (compare-and-swap, a lease, a study
        rule) sees every earlier commit and no later one can slip between. Nested calls join the outer one."""
        if getattr(self.local, "conn", None) is not None:
            yield
            return
        try:
            with self._write() as conn:
                self.local.conn = conn
                try:
                    yield
                finally:
                    self.local.conn = None
        except self.psycopg.errors.IdleInTransactionSessionTimeout:
            raise StorageError(
                f"this process stopped for over {STALLED_WRITER_S} s inside a write to {self.label} (paused, or "
                "starved of CPU), so the server ended its connection and undid the write: nothing of it was stored; "
                "try again",
                code="storage_postgres",
                path=self.label,
            ) from None
        self.commits += 1

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        """A connection in a transaction that holds the write lock (`write`)."""
        with self._conn() as conn, conn.transaction():
            # as SQLite's busy timeout: a writer that holds the lock longer makes this one fail with the fix, not
            # wait forever; one that stalls (STALLED_WRITER_S) or dies loses its connection, which frees the lock
            conn.execute(  # one round trip (no parameters: both statements in one query)
                f"set local lock_timeout = '{WRITE_WAIT_S}s'; "
                f"set local idle_in_transaction_session_timeout = '{STALLED_WRITER_S}s'"
            )
            try:
                conn.execute("select pg_advisory_xact_lock(%s)", [WRITE_LOCK])
            except self.psycopg.errors.LockNotAvailable:
                raise StorageError(
                    f"another process has held the Postgres database {self.label} for writing for {WRITE_WAIT_S} s; "
                    "try again, and look for a hung keem process or a long transaction (pg_stat_activity)",
                    code="storage_postgres",
                    path=self.label,
                ) from None
            conn.execute("set local lock_timeout = 0")
            yield conn

    def in_transaction(self) -> bool:
        return getattr(self.local, "conn", None) is not None

    # -- queries ------------------------------------------------------------------------------------
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._conn() as conn:
            cursor = conn.execute(translate(sql), list(params))
            return list(cursor.fetchall()) if cursor.description else []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._conn() as conn:
            return int(conn.execute(translate(sql), list(params)).rowcount)

    def insert(self, table: str, row: dict[str, Any]) -> int:
        columns = ", ".join(row)
        marks = ", ".join(["%s"] * len(row))
        with self._conn() as conn:
            found = conn.execute(f"insert into {table} ({columns}) values ({marks}) returning id", list(row.values()))
            return int(found.fetchone()["id"])

    def insert_many(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        columns = list(rows[0])
        marks = ", ".join(["%s"] * len(columns))
        with self._conn() as conn, conn.cursor() as cursor:
            cursor.executemany(
                f"insert into {table} ({', '.join(columns)}) values ({marks})",
                [[r.get(c) for c in columns] for r in rows],
            )

    def tables_with(self, column: str) -> list[str]:
        rows = self.rows(
            "select table_name from information_schema.columns where table_schema = current_schema() "
            "and column_name = ? order by table_name",
            [column],
        )
        return [r["table_name"] for r in rows]

    # -- notifications (cache eviction across processes) -----------------------------------------------
    def notify(self, channel: str, payload: str) -> None:
        """NOTIFY `channel`: inside a write transaction it is sent at commit (never for a rollback)."""
        with self._conn() as conn:
            conn.execute("select pg_notify(%s, %s)", [channel, payload])

    def listen(
        self, channels: Sequence[str], timeout: float | None, running: Callable[[], bool] | None = None
    ) -> Iterator[tuple[str, str]]:
        """(channel, payload) of every NOTIFY on `channels`, on a connection of its own, until `timeout` seconds
        pass with none (None: forever); with `running`, until it says False, asked every `timeout` seconds, on the
        same connection (one listening anew each second missed what came while it reconnected). Stop early by
        leaving the loop; the connection closes with it."""
        from psycopg import sql

        try:
            conn = self.psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except self.psycopg.Error as exc:
            raise self.error(exc, "cannot reach the Postgres database") from None
        with conn:
            for channel in channels:
                conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
            while True:
                got = False
                for note in conn.notifies(timeout=timeout, stop_after=1):
                    got = True
                    yield note.channel, note.payload
                if not got and (running is None or not running()):
                    return

    # -- erasure ------------------------------------------------------------------------------------
    def vacuum(self, tables: Sequence[str]) -> bool:
        """After an erasure: rewrite the tables it touched so the deleted text leaves the data files, then
        CHECKPOINT where this role may (superuser or pg_checkpoint) so the WAL holding it is recycled sooner.

        Plain VACUUM removes dead row versions but leaves their bytes in the page's free space until new rows
        overwrite them (measured: a pageinspect scan still finds them); VACUUM FULL writes each table and its
        indexes anew and drops the old files. It locks the table meanwhile, so it waits at most LOCK_TIMEOUT for
        readers to finish and otherwise falls back to plain VACUUM, saying so. KEEM_PG_VACUUM=plain chooses plain
        VACUUM always (a large store where a forget must not pause chat; docs/postgres.md). Outside any
        transaction, on a connection of its own. True when every step ran; a failure is logged, never raised (the
        rows are gone either way)."""
        if self.in_transaction():  # the delete is not committed yet: its rows are not dead, nothing to vacuum
            log.warning("erasure cleanup skipped on %s: call it after the write() that deleted commits", self.label)
            return False
        full = os.environ.get("KEEM_PG_VACUUM", "full").strip().lower() != "plain"
        done = True
        try:
            with self.pool.connection() as conn:
                conn.execute(f"set lock_timeout = '{LOCK_TIMEOUT_S}s'")
                try:
                    if full:  # plain VACUUM leaves the bytes in free space anyway: nothing to wait for
                        done = self._wait_for_older_transactions(conn)
                    for table in dict.fromkeys(tables):
                        done = self._vacuum(conn, table, full) and done
                    try:
                        conn.execute("checkpoint")
                    except self.psycopg.errors.InsufficientPrivilege:
                        log.info(
                            "CHECKPOINT needs superuser or pg_checkpoint on %s; Postgres checkpoints on its own "
                            "schedule",
                            self.label,
                        )
                        done = False
                finally:
                    conn.execute("reset lock_timeout")
        except self.psycopg.Error as exc:
            log.warning("cleaning up after an erasure on %s failed: %s", self.label, exc)
            return False
        return done

    def _wait_for_older_transactions(self, conn: Any) -> bool:
        """Wait (at most LOCK_TIMEOUT_S) until no other session of this database holds a transaction that began
        before now with a snapshot or a write: the row versions an erasure deleted are still visible to those,
        so VACUUM FULL would copy their bytes into the rewritten table, where a later plain VACUUM leaves them. A
        second app process or worker mid-transaction is the usual case, over in milliseconds. False, and logged,
        when one is still open (a long report, an idle-in-transaction session); sessions of other roles are not
        visible without pg_read_all_stats, and are not waited for."""
        older = (
            "select count(*) as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() "
            "and (backend_xmin is not null or backend_xid is not null) and xact_start < %s"
        )
        began = conn.execute("select statement_timestamp() as t").fetchone()["t"]
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while (count := conn.execute(older, [began]).fetchone()["n"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if count:
            log.warning(
                "%d transaction(s) older than the erasure are still open on %s: the rows they can see stay in the "
                "rewritten tables until a VACUUM FULL after they end",
                count,
                self.label,
            )
        return not count

    def _vacuum(self, conn: Any, table: str, full: bool) -> bool:
        errors = self.psycopg.errors
        if full:
            try:
                conn.execute(f"vacuum full {table}")
                return True
            except errors.UndefinedTable:
                return True
            except (errors.LockNotAvailable, errors.InsufficientPrivilege) as exc:
                log.warning(
                    "VACUUM FULL %s on %s not possible now (%s); plain VACUUM instead: the deleted bytes may "
                    "stay in free space until overwritten",
                    table,
                    self.label,
                    " ".join(str(exc).split()),
                )
        try:
            conn.execute(f"vacuum {table}")
        except errors.UndefinedTable:
            return True
        except self.psycopg.Error as exc:
            log.warning("VACUUM %s on %s failed: %s", table, self.label, exc)
            return False
        return not full

    # -- migrations ---------------------------------------------------------------------------------
    def applied(self, set_name: str) -> list[str]:
        if self.one_value("select to_regclass('keem_migrations') is not null as present") is not True:
            return []
        rows = self.rows(
            "select name from keem_migrations where migration_set = ? order by applied_at, name", [set_name]
        )
        return [r["name"] for r in rows]

    def one_value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        found = self.rows(sql, params)
        return next(iter(found[0].values())) if found else None

    def refuse_newer(self, schema: Schema) -> None:
        """Raise MigrationError (migration_newer) if a newer keem migrated `schema`'s set here; reads only."""
        newer = schema.newer(self.applied(schema.name), postgres=True)
        if newer:
            raise newer_error(self.label, schema.name, newer)

    def migrate(self, schema: Schema) -> None:
        """Run `schema`'s pending Postgres migrations in one transaction, one process at a time (an advisory
        lock); refuses a database a newer keem migrated. `keem_migrations` records each applied name."""
        try:
            with self._conn() as conn, conn.transaction():
                conn.execute("select pg_advisory_xact_lock(%s)", [MIGRATE_LOCK])
                conn.execute(
                    "create table if not exists keem_migrations (migration_set text not null, name text not null, "
                    "applied_at text not null, primary key (migration_set, name))"
                )
                applied = [
                    r["name"]
                    for r in conn.execute(
                        "select name from keem_migrations where migration_set = %s", [schema.name]
                    ).fetchall()
                ]
                newer = schema.newer(applied, postgres=True)
                if newer:
                    raise newer_error(self.label, schema.name, newer)
                for name, step in schema.postgres:
                    if name in applied:
                        continue
                    if callable(step):
                        step(conn)
                    else:
                        conn.execute(step)
                    conn.execute(
                        "insert into keem_migrations (migration_set, name, applied_at) values (%s, %s, "
                        "to_char(clock_timestamp() at time zone 'utc', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'))",
                        [schema.name, name],
                    )
        except MigrationError:
            raise
        except self.psycopg.OperationalError as exc:
            raise self.error(exc, "cannot reach the Postgres database") from None
        except self.psycopg.Error as exc:
            raise MigrationError(
                f"migrating {self.label} failed ({' '.join(str(exc).split())}); restore a backup or use a new database",
                code="migration_failed",
                path=self.label,
            ) from None

    def close(self) -> None:
        self.pool.close()
