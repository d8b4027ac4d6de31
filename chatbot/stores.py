"""Opening the store at a process's start, refusing one a newer keem migrated in any of the project's migration
sets before anything is written: the store's own (memory/store/migrations.py, checked as it migrates) and the trial
records' (chatbot/study_records.py, migrated only at a trial's first rule, so checked here)."""

from __future__ import annotations

from chatbot.study_records import schema as trial_schema
from memory.backup import open_store
from memory.store import Store


def open_checked(db_path: str, backup_dir: str = "") -> Store:
    """The store at `db_path` (restored from `backup_dir` when missing), migrated; a MigrationError (migration_newer:
    upgrade keem-chat) when a newer keem migrated either set, with nothing written."""
    store = open_store(db_path, backup_dir)
    try:
        store.refuse_newer(trial_schema)
    except BaseException:
        store.close()
        raise
    return store
