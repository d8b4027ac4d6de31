"""A named set of numbered migrations, for SQLite (sqlite-utils) and for Postgres (memory/store/postgres.py applies
those); memory/store/migrations.py is the store's set, chatbot/study_records.py the trial records' set."""

from __future__ import annotations

import importlib.metadata
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from models.errors import MigrationError

PostgresStep = Callable[[Any], None] | str  # a migration: SQL (several statements allowed) or fn(connection)


def installed_version() -> str:
    """This installation's keem-chat release, for the error that asks to upgrade it."""
    try:
        return importlib.metadata.version("keem-chat")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def newer_error(path: str, set_name: str, newer: set[str]) -> MigrationError:
    """The refusal of a database a newer keem migrated: what it ran that this code lacks, and what to do. Raised
    before anything is written, so the database stays as the newer keem left it."""
    label = "" if set_name == "keem" else f" of {set_name}"
    return MigrationError(
        f"database {path} was written by a newer keem (migrations{label} {sorted(newer)} are unknown to this "
        f"installation, keem-chat {installed_version()}); upgrade keem-chat on this machine to the release that "
        "migrated it (pip install -U keem-chat, or git pull and make install) and start again, or point --db "
        "(KEEM_DB) at another database. Nothing was written to it",
        code="migration_newer",
        path=path,
    )


class Schema:
    """A named set of numbered migrations (sqlite-utils `Migrations`) and the project's own list of their names.

    Register a migration with `@schema`; never edit one that shipped, add the next number. `retired` names
    migrations that once belonged to this set and moved to another (a database that ran them stays valid).
    """

    def __init__(self, name: str, retired: Sequence[str] = ()):
        self.name = name
        self.migrations = Migrations(name)
        self.names: list[str] = []
        self.retired = tuple(retired)
        # The same schema for Postgres, numbered apart (memory/store/postgres.py applies them). EVERY schema change
        # needs a migration in both sets: a SQLite one registered with @schema and a Postgres one with `postgres`.
        self.postgres: list[tuple[str, PostgresStep]] = []

    def add_postgres(self, name: str, step: PostgresStep) -> None:
        """Register the next Postgres migration: SQL (several statements allowed) or fn(psycopg connection)."""
        self.postgres.append((name, step))

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
        """The names of this set's migrations the database has run, in the order it first ran them. A migration
        outside a transaction that two processes opening one new file ran at once is recorded twice: it counts
        once (it is safe to run again, `outside_transaction`). Nothing serialises the two: a flock on the database
        file drops the process's SQLite locks when its descriptor closes (POSIX locks are per process; it made a
        connection read a stale version in tests/test_erasure.py), and a lock file would leave a file beside
        every database."""
        return list(dict.fromkeys(m.name for m in self.migrations.applied(db)))

    def newer(self, applied: Sequence[str], postgres: bool = False) -> set[str]:
        """The names in `applied` (a database's record of this set) that this code does not know: a newer keem's."""
        known = {n for n, _ in self.postgres} if postgres else set(self.names)
        return set(applied) - known - set(self.retired)

    def refuse_newer(self, db: Database, path: str) -> None:
        """Raise MigrationError (migration_newer) if a newer keem migrated this set of the database; reads only."""
        newer = self.newer(self.applied(db))
        if newer:
            raise newer_error(path, self.name, newer)

    def apply(self, db: Database, path: str) -> None:
        """Run the pending migrations; refuses a database a newer keem wrote (it ran migrations this one lacks)."""
        self.refuse_newer(db, path)
        seen = set(self.applied(db))
        for attempt in range(10):
            try:
                self.migrations.apply(db)
                return
            except sqlite3.Error as exc:
                # another process opening the same new file migrates at the same time: its table exists, its
                # record is in, or its transaction holds the file (a deferred one that must write fails at once
                # with "locked" rather than wait). Run again, which skips what it applied; a failed migration
                # rolled back, a non-transactional one is safe to run again (`outside_transaction`)
                now = set(self.applied(db))
                if attempt < 9 and (now != seen or "locked" in str(exc).lower()):
                    seen = now
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise MigrationError(
                    f"migrating {path} failed ({exc}); restore a backup or use a new --db",
                    code="migration_failed",
                    path=path,
                ) from exc
