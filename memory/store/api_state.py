"""The HTTP API's state, kept in the store so any app process answers any caller and a restart forgets nothing
(chatbot/api/sessions.py): each user's open API conversation (a row keyed by the user, naming a session of
`sessions`), and the Idempotency-Keys of their recent requests with what a retry needs to answer the same: the
digest of the request's body, the turns it stored and the reply stored for it (ids only; the text is the turns').

No text of the user is kept here: a key is stored as its SHA-256, a body as its digest, turns by id. Forgetting a
user deletes their rows (Users.delete); erasing a sentence redacts the turns these ids point to (erasure.py), so a
replayed answer reads as redacted too. Plain SQL with `?` parameters, as every store part."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from memory.store.connection import Connection, now_iso
from memory.store.users import Sessions

KEYS_PER_USER = 64  # Idempotency-Keys kept per user (a retry comes seconds later, not 64 messages later)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass
class Attempt:
    """A request sent with an Idempotency-Key: its body's digest, the user turn it stored, and the reply stored for
    it (None: none yet, or the reply failed before anything streamed)."""

    digest: str
    session_id: int
    turn_id: int | None
    reply_id: int | None = None
    turn_ids: tuple[int, ...] = ()  # POST /v1/sessions/messages: the turns it stored


def _attempt(row: dict[str, Any]) -> Attempt:
    return Attempt(
        row["digest"], row["session_id"], row["turn_id"], row["reply_id"], tuple(json.loads(row["turn_ids"] or "[]"))
    )


class ApiState:
    """Open API conversations and Idempotency-Keys, per user."""

    def __init__(self, conn: Connection):
        self.conn = conn

    # -- the open conversation ---------------------------------------------------------------------
    def open_session(self, user_id: int) -> int | None:
        """The user's open API conversation (a session still open), or None."""
        row = self.conn.one(
            "select c.session_id from api_conversations c join sessions s on s.id = c.session_id "
            "where c.user_id = ? and s.status = 'open'",
            [user_id],
        )
        return int(row["session_id"]) if row is not None else None

    def open_or_start(self, user_id: int, strategy: str, chat_model: str) -> tuple[int, bool]:
        """The user's open API conversation, or a new session that becomes it, in one write transaction (two
        processes answering the same user at once open one session): (session id, whether it is new)."""
        with self.conn.write():
            found = self.open_session(user_id)
            if found is not None:
                return found, False
            session_id = Sessions(self.conn).start(user_id, strategy, chat_model)  # joins this transaction
            self.conn.execute(
                "insert into api_conversations (user_id, session_id, opened_at) values (?, ?, ?) "
                "on conflict (user_id) do update set session_id = excluded.session_id, opened_at = excluded.opened_at",
                [user_id, session_id, now_iso()],
            )
            return session_id, True

    def sessions(self) -> set[int]:
        """The sessions that are (or were) users' API conversations and are still open."""
        rows = self.conn.rows(
            "select c.session_id from api_conversations c join sessions s on s.id = c.session_id "
            "where s.status = 'open'"
        )
        return {int(r["session_id"]) for r in rows}

    def went_on(self, session_id: int, known: int) -> bool:
        """Whether the session ended, or holds a turn after `known` (the last this process stored or saw): another
        process went on with the conversation, and this one's idea of it is old."""
        row = self.conn.one(
            "select s.status, (select max(t.id) from turns t where t.session_id = s.id) as last "
            "from sessions s where s.id = ?",
            [session_id],
        )
        return row is None or row["status"] != "open" or int(row["last"] or 0) > known

    # -- Idempotency-Keys ----------------------------------------------------------------------------
    def attempt(self, user_id: int, key: str) -> Attempt | None:
        """The request this user sent earlier with `key`, or None."""
        row = self.conn.one("select * from api_requests where user_id = ? and key_hash = ?", [user_id, key_hash(key)])
        return _attempt(row) if row is not None else None

    def remember(self, user_id: int, key: str, attempt: Attempt) -> None:
        """Keep the request just stored under `key` (the user's last KEYS_PER_USER keys stay)."""
        with self.conn.write():
            self.conn.execute(
                "insert into api_requests (user_id, key_hash, digest, session_id, turn_id, reply_id, turn_ids, "
                "created_at) values (?, ?, ?, ?, ?, ?, ?, ?) on conflict (user_id, key_hash) do nothing",
                [
                    user_id,
                    key_hash(key),
                    attempt.digest,
                    attempt.session_id,
                    attempt.turn_id,
                    attempt.reply_id,
                    json.dumps(list(attempt.turn_ids)),
                    now_iso(),
                ],
            )
            self.conn.execute(
                "delete from api_requests where user_id = ? and id not in "
                "(select id from api_requests where user_id = ? order by id desc limit ?)",
                [user_id, user_id, KEYS_PER_USER],
            )

    def replied(self, user_id: int, key: str, reply_id: int | None) -> None:
        """The reply stored for the request under `key` (None: none, the reply failed before anything streamed)."""
        with self.conn.write():
            self.conn.execute(
                "update api_requests set reply_id = ? where user_id = ? and key_hash = ?",
                [reply_id, user_id, key_hash(key)],
            )
