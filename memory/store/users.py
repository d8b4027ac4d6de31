"""Users, their sessions and the turns of each session."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.store.connection import Connection, now_iso, placeholders
from memory.store.tokens import caller_key
from models.errors import InputError, UnknownUserError, UserForgottenError

REPLY_MARKS = ("stopped", "failed", "replaced")  # a reply's mark (turns.mark; null: a whole reply)


def check_session(conn: Connection, session_id: int, user_id: int) -> None:
    """The session exists and is this user's, or UserForgottenError: the user was forgotten meanwhile (by any tab
    or process; ids are never reused, so a session that is gone never turns into another user's)."""
    row = conn.one(
        "select 1 as ok from sessions s join users u on u.id = s.user_id where s.id = ? and u.id = ?",
        [session_id, user_id],
    )
    if row is None:
        raise UserForgottenError(
            f"user {user_id} (session {session_id}) was deleted meanwhile; nothing was stored for them: "
            "log in again to start anew"
        )


# The channel a forget is announced on (Postgres NOTIFY at commit; chatbot/worker.py listens): each process then
# drops the user's cached index and live sessions at once, instead of at its next read of that user.
FORGET_CHANNEL = "keem_forget"


class Users:
    """The people the store remembers, by name."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.forgotten = 0  # users deleted through this store (backups drop older snapshots)

    def find(self, name: str) -> int | None:
        row = self.conn.one("select id from users where name = ?", [name])
        return row["id"] if row else None

    def require(self, name: str) -> int:
        user_id = self.find(name)
        if user_id is None:
            raise UnknownUserError(f"no user '{name}' in this database; start one with: keem session --user {name}")
        return user_id

    def get_or_create(self, name: str) -> int:
        with self.conn.write():
            user_id = self.find(name)
            if user_id is None:
                user_id = self.conn.insert("users", {"name": name, "created_at": now_iso()})
            return int(user_id)

    def all(self) -> list[dict[str, Any]]:
        return self.conn.rows("select * from users order by id")

    def overview(self) -> list[dict[str, Any]]:
        """Every user with their trial strategy, session and version counts and last session start."""
        return self.conn.rows(
            "select u.name, u.created_at, u.strategy, "
            "(select count(*) from sessions s where s.user_id = u.id) as sessions, "
            "(select max(started_at) from sessions s where s.user_id = u.id) as last_session, "
            "(select count(*) from memory_versions v where v.user_id = u.id) as versions "
            "from users u order by u.id"
        )

    def assign_strategy(self, user_id: int, choices: Sequence[str]) -> str:
        """The user's strategy (a user trial's, or KEEM_STRATEGY=balanced): the one assigned before, else the choice
        with the fewest users (first on ties)."""
        with self.conn.write():
            row = self.conn.one("select strategy from users where id = ?", [user_id])
            if row and row["strategy"] in choices:
                return str(row["strategy"])
            counts = {
                r["strategy"]: r["n"]
                for r in self.conn.rows(
                    "select strategy, count(*) as n from users where strategy is not null group by strategy"
                )
            }
            chosen = min(choices, key=lambda c: counts.get(c, 0))
            self.conn.execute("update users set strategy = ? where id = ?", [chosen, user_id])
            return chosen

    def delete(self, user_id: int) -> None:
        """Forget a user: every turn, session, memory version, sentence and job, in one transaction. Rows of other
        tables that reference the user or their sessions with ON DELETE CASCADE (a user trial's consents and
        answers, chatbot/study_records.py) go with them, as do the API rate counters of their tokens; those of
        app tokens that named them are deleted by the name's key."""
        with self.conn.write():
            row = self.conn.one("select name from users where id = ?", [user_id])
            if row is not None:
                self.conn.execute("delete from api_rates where caller = ?", [caller_key(row["name"])])
            tables = ("api_requests", "api_conversations", "memory_sentences", "memory_versions", "update_jobs")
            for table in (*tables, "turns", "sessions", "api_tokens"):
                self.conn.execute(f"delete from {table} where user_id = ?", [user_id])
            self.conn.execute("delete from users where id = ?", [user_id])
            self.conn.execute("update data_generation set forgets = forgets + 1")
            self.conn.notify(FORGET_CHANNEL, str(user_id))  # other processes evict at once (Postgres; a hint only)
        self.forgotten += 1

    def generation(self) -> int:
        """How many forgets this database has seen, from any process (a cache that saw another number re-checks
        which of its users still exist)."""
        row = self.conn.one("select forgets from data_generation")
        return int(row["forgets"]) if row else 0

    def existing(self, user_ids: Sequence[int]) -> set[int]:
        """Which of these users still exist (ids are never reused: a missing one was forgotten)."""
        ids = list(user_ids)
        if not ids:
            return set()
        return {r["id"] for r in self.conn.rows(f"select id from users where id in ({placeholders(ids)})", ids)}


class Sessions:
    """Conversations: one user, one strategy and chat model, open until ended."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def start(self, user_id: int, strategy: str, chat_model: str) -> int:
        with self.conn.write():
            return self.conn.insert(
                "sessions",
                {
                    "user_id": user_id,
                    "started_at": now_iso(),
                    "strategy": strategy,
                    "chat_model": chat_model,
                    "status": "open",
                },
            )

    def end(self, session_id: int, reason: str = "user") -> bool:
        """End the session if it is open; whether this call ended it (another process may have, just now)."""
        with self.conn.write():
            return (
                self.conn.execute(
                    "update sessions set status = 'ended', ended_at = ?, end_reason = ? "
                    "where id = ? and status = 'open'",
                    [now_iso(), reason, session_id],
                )
                > 0
            )

    def check(self, session_id: int, user_id: int) -> None:
        """The session exists and is this user's, or UserForgottenError (see `check_session`)."""
        check_session(self.conn, session_id, user_id)

    def existing(self, session_ids: Sequence[int]) -> set[int]:
        """Which of these sessions still exist."""
        ids = list(session_ids)
        if not ids:
            return set()
        return {r["id"] for r in self.conn.rows(f"select id from sessions where id in ({placeholders(ids)})", ids)}

    def started(self, user_id: int, session_ids: Sequence[int]) -> dict[int, str]:
        """When each of the user's sessions among `session_ids` started (stored UTC ISO text); others are left out."""
        if not session_ids:
            return {}
        rows = self.conn.rows(
            f"select id, started_at from sessions where user_id = ? and id in ({placeholders(session_ids)})",
            [user_id, *session_ids],
        )
        return {int(r["id"]): str(r["started_at"]) for r in rows}

    def get(self, session_id: int) -> dict[str, Any]:
        row = self.conn.one("select * from sessions where id = ?", [session_id])
        if row is None:
            raise InputError(f"no session {session_id}")
        return row

    def previous(self, user_id: int, session_id: int) -> dict[str, Any] | None:
        """The user's last session before this one that had turns."""
        return self.conn.one(
            "select * from sessions s where user_id = ? and id < ? and exists "
            "(select 1 from turns t where t.session_id = s.id) order by id desc limit 1",
            [user_id, session_id],
        )

    def of_user(self, user_id: int) -> list[dict[str, Any]]:
        return self.conn.rows("select * from sessions where user_id = ? order by id", [user_id])

    def past(self, user_id: int) -> list[dict[str, Any]]:
        """The user's ended sessions that hold a message, newest first, each with its number of turns (`turns`, not
        counting replies the user had replaced) and its first user message (`first`)."""
        return self.conn.rows(
            "select s.id, s.started_at, s.ended_at, count(t.id) as turns, "
            "(select text from turns f where f.session_id = s.id and f.role = 'user' order by f.id limit 1) as first "
            "from sessions s join turns t on t.session_id = s.id and (t.mark is null or t.mark != 'replaced') "
            "where s.user_id = ? and s.status = 'ended' group by s.id order by s.id desc",
            [user_id],
        )

    def all_open(self) -> list[dict[str, Any]]:
        """Every session not yet ended, of every user."""
        return self.conn.rows("select * from sessions where status = 'open' order by id")


class Turns:
    """What was said in a session, one row per message."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def add(
        self,
        session_id: int,
        user_id: int,
        role: str,
        text: str,
        reply_to: int | None = None,
        mark: str | None = None,
    ) -> int:
        """Store one message of this user's session; an assistant's names the user turn it answers (`reply_to`),
        which may have been followed by messages typed while it streamed, and may carry a REPLY_MARKS entry (a reply
        stopped by the user, or cut by a failure). UserForgottenError (nothing stored) when the session is no longer
        the user's: checked in the same transaction as the insert, so a forget from another process cannot slip
        between."""
        if mark is not None and mark not in REPLY_MARKS:
            raise InputError(f"unknown reply mark {mark!r}; one of {', '.join(REPLY_MARKS)}")
        row: dict[str, Any] = {
            "session_id": session_id,
            "user_id": user_id,
            "role": role,
            "text": text,
            "created_at": now_iso(),
        }
        if reply_to is not None:
            row["reply_to"] = reply_to
        if mark is not None:
            row["mark"] = mark
        with self.conn.write():
            check_session(self.conn, session_id, user_id)
            return self.conn.insert("turns", row)

    def replace(self, turn_id: int, session_id: int, user_id: int) -> None:
        """Mark this session's reply as replaced (the user asked for another reply to the same message): it stays
        stored, honestly, and the session's dialogue leaves it out from now on."""
        with self.conn.write():
            check_session(self.conn, session_id, user_id)
            self.conn.execute(
                "update turns set mark = 'replaced' where id = ? and session_id = ? and role = 'assistant'",
                [turn_id, session_id],
            )

    def said_anything(self, session_id: int) -> bool:
        """Whether the session holds a user turn (a user trial counts it then)."""
        return (
            self.conn.one("select 1 from turns where session_id = ? and role = 'user' limit 1", [session_id])
            is not None
        )

    def of_session(self, session_id: int, *, replaced: bool = False) -> list[dict[str, Any]]:
        """The session's turns in conversation order: each reply right after the message it answers, even when
        later messages were stored before it (typed while it streamed). Replies the user had replaced by another
        are left out unless `replaced` (a transcript shows them, marked)."""
        where = "" if replaced else " and (mark is null or mark != 'replaced')"
        return self.conn.rows(
            f"select * from turns where session_id = ?{where} order by coalesce(reply_to, id), id", [session_id]
        )
