"""Snapshots of the SQLite store in another folder (on a Space: a mounted storage bucket); the live file stays local.

SQLite's locking is unproven on network and FUSE mounts, so the database is never opened there. A snapshot is
written with SQLite's online backup API under a temporary name and renamed into place, so a reader never sees a
half-written file; the newest KEEP are kept. When the database file is missing at start (a fresh Space
container), it is restored from the newest snapshot that passes an integrity check. After a user is forgotten,
the snapshots from before are deleted as soon as a new one is written, so the forgotten user is gone there too.

Several processes may share one database file (the CLI beside the app; `keem serve`'s app processes and workers)
and so one backup folder. A snapshot is written holding a lock beside the database (`<db>.backup.lock`, on the local
disk where SQLite's own locks work; the backup folder may be a mount where they do not): a forget's snapshot waits
for one another process has under way, then deletes it with the rest, so no copy begun before the forget outlives
it (nor a `.part` file a killed process left). Periodic snapshots are taken once per interval in all: a process whose
turn comes while another's snapshot is younger than the interval skips its own.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from memory.store import Store
from memory.store.connection import url_scheme
from models.errors import InputError

log = logging.getLogger(__name__)
KEEP = 3
LOCK_WAIT_S = 120.0  # how long a snapshot waits for another process's (a big database's takes seconds)
ON_POSTGRES = (
    "KEEM_BACKUP_DIR snapshots are SQLite files; a Postgres store is backed up with Postgres's own tools: "
    "pg_dump (a logical copy) or pg_basebackup with WAL archiving (docs/postgres.md); unset KEEM_BACKUP_DIR"
)
PREFIX, SUFFIX = "keem-", ".db"


class Backups:
    """A folder of timestamped snapshots of one store."""

    def __init__(self, folder: str | os.PathLike[str], keep: int = KEEP):
        self.folder = Path(folder)
        self.keep = max(1, keep)

    def snapshots(self) -> list[Path]:
        """Snapshot files, oldest first (their names sort by time)."""
        if not self.folder.is_dir():
            return []
        return sorted(
            p for p in self.folder.iterdir() if p.name.startswith(PREFIX) and p.name.endswith(SUFFIX) and p.is_file()
        )

    def snapshot(self, store: Store, *, drop_older: bool = False, unless_within_s: float | None = None) -> Path | None:
        """Write a consistent copy of `store` now; with `drop_older`, delete every earlier snapshot (and any half-
        written one). `unless_within_s`: skip it (None) when the folder's newest snapshot, whichever process wrote
        it, is younger than that many seconds."""
        if store.path == ":memory:":
            raise InputError("an in-memory database cannot be backed up; give KEEM_DB a file path")
        if store.dialect != "sqlite":
            raise InputError(ON_POSTGRES)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot create the backup folder {self.folder} ({exc.strerror}); "
                "fix KEEM_BACKUP_DIR or mount the volume"
            ) from None
        with FileLock(f"{store.path}.backup.lock", timeout=LOCK_WAIT_S):
            if unless_within_s is not None and not drop_older:
                newest = self.snapshots()[-1:]
                if newest and time.time() - newest[0].stat().st_mtime < unless_within_s:
                    return None
            return self._write(store, drop_older)

    def _write(self, store: Store, drop_older: bool) -> Path:
        """The snapshot itself (holding the lock)."""
        name = f"{PREFIX}{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}{SUFFIX}"
        part = self.folder / f".{name}.part"
        # A connection of its own, in one step: in WAL mode that reads one consistent state while chat turns
        # keep writing through the store's connection (holding the store's lock would stall them).
        source, target = _read_only(store.path), sqlite3.connect(part)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        os.replace(part, self.folder / name)
        older = [p for p in self.snapshots() if p.name < name]
        if drop_older:  # a .part no live process writes (they hold the lock): a killed one's, maybe with the user
            older += [p for p in self.folder.glob(f".{PREFIX}*{SUFFIX}.part") if p != part]
        for path in older if drop_older else older[: max(0, len(older) + 1 - self.keep)]:
            path.unlink(missing_ok=True)
        return self.folder / name

    def restore(self, db_path: str | os.PathLike[str]) -> Path | None:
        """When `db_path` does not exist, copy the newest sound snapshot there; returns the snapshot used."""
        db_path = Path(db_path)
        if db_path.exists():
            return None
        for snapshot in reversed(self.snapshots()):
            if not _sound(snapshot):
                log.warning("skipping damaged backup %s", snapshot)
                continue
            db_path.parent.mkdir(parents=True, exist_ok=True)
            part = db_path.with_name(db_path.name + ".restoring")
            source, target = _read_only(snapshot), sqlite3.connect(part)
            try:
                source.backup(target)
            finally:
                source.close()
                target.close()
            os.replace(part, db_path)
            return snapshot
        return None


def _read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection; the path goes in as a file: URI, escaped (a '?' or '#' in a folder name is no query)."""
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=30)


def _sound(path: Path) -> bool:
    try:
        conn = _read_only(path)
        try:
            return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False


def snapshot_if_configured(backup_dir: str, store: Store, *, drop_older: bool = False) -> Path | None:
    """For one-shot commands (keem session / memory import / forget): a snapshot after they wrote, when configured."""
    return Backups(backup_dir).snapshot(store, drop_older=drop_older) if backup_dir else None


def open_store(db_path: str, backup_dir: str = "") -> Store:
    """The store at `db_path` (a SQLite file, or a postgresql:// URL: memory/store/connection.py decides), first
    restored from the newest snapshot in `backup_dir` when the file is missing."""
    if backup_dir and url_scheme(db_path):
        raise InputError(ON_POSTGRES)
    if backup_dir and db_path != ":memory:":
        used = Backups(backup_dir).restore(db_path)
        if used is not None:
            log.warning("restored %s from the backup %s", db_path, used)
    return Store(db_path)
