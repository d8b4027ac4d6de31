"""The SQLite store (the source of truth), one part per concern over one shared connection.

connection.py opens the file (WAL, pragmas), applies a migration set and turns SQLite and file-system failures into
StorageErrors with the fix; migrations.py is the memory engine's schema; users.py holds users, sessions and turns;
versions.py memory versions and their sentences (a commit states its base version; rebase.py replays a change onto
a newer latest version or refuses it), notes.py why a version is as it is (codes with parameters); queue.py the
durable queue of update jobs; erasure.py forgetting a user or a sentence with no copy left in the file, and its
audit rows; tokens.py the HTTP API's bearer tokens (hashes only); api_state.py the API's open conversations and
Idempotency-Keys (ids and digests only). A
caller writes `store.users.get_or_create(name)`, `store.versions.commit(...)`, `store.queue.claim()`. The user-trial
tables are not here: chatbot/study_records.py keeps them, with a migration set of its own.
"""

from __future__ import annotations

import os

from memory.store.api_state import ApiState
from memory.store.connection import Connection, now_iso, storage_error
from memory.store.emotions import EmotionRecord
from memory.store.erasure import MARKER, Erased, Erasure
from memory.store.migrations import schema
from memory.store.notes import Note, note
from memory.store.queue import Queue
from memory.store.sentences import Sentence, Version
from memory.store.tokens import Token, Tokens
from memory.store.users import Sessions, Turns, Users
from memory.store.versions import Versions

__all__ = [
    "MARKER",
    "EmotionRecord",
    "Erased",
    "Note",
    "Sentence",
    "Store",
    "Token",
    "Version",
    "note",
    "now_iso",
    "storage_error",
]


class Store(Connection):
    """One SQLite file with the memory engine's schema: `users`, `sessions`, `turns`, `versions`, `queue`,
    `erasure`, `tokens`, `api`.

    Safe to share between threads (one connection, one lock); `write()` is one transaction across the parts.
    """

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__(path, schema)
        self.users = Users(self)
        self.sessions = Sessions(self)
        self.turns = Turns(self)
        self.versions = Versions(self)
        self.queue = Queue(self)
        self.erasure = Erasure(self, self.users)
        self.tokens = Tokens(self)
        self.api = ApiState(self)
