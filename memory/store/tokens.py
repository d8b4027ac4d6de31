"""Bearer tokens of the HTTP API (chatbot/api): a token is shown once when made; only its SHA-256 is kept, so the
database never holds a token, and a token is found by hashing what a request presents.

A user's token acts for that user only; an app token (no user) acts for any user a request names (a builder who
manages their own users). Revoked tokens stay listed, marked, and never work again. Plain SQL with `?` parameters
through the connection's rows/one/insert/write helpers, as every store part.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from memory.store.connection import Connection, now_iso
from models.errors import InputError

PREFIX = "keem_"  # every token starts so (a secret scanner can tell a leaked one); the rest is random


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def caller_key(user: str | None) -> str:
    """The rate counter's key of a caller of a token: the SHA-256 of the user an app token names (no name is kept
    here), '' for a user's own token."""
    return "" if user is None else hashlib.sha256(f"user:{user}".encode()).hexdigest()


# One request of a caller, counted in one statement that every process of the store shares (GCRA, the token bucket
# written as one number): `tat` is when the caller's bucket is full again. A request is let in when tat - now is at
# most the burst (a full bucket's worth less one interval), and moves tat one interval on from max(tat, now); a
# refused one changes nothing. Parameters: token, caller, now + interval; now, burst; now, burst, now, now +
# interval, interval. Both engines read `api_rates.tat` in SET as the row before the update.
TAKE = (
    "insert into api_rates (token_id, caller, tat, refused) values (?, ?, ?, 0) "
    "on conflict (token_id, caller) do update set "
    "refused = case when api_rates.tat - ? > ? then 1 else 0 end, "
    "tat = case when api_rates.tat - ? > ? then api_rates.tat when api_rates.tat < ? then ? "
    "else api_rates.tat + ? end "
    "returning tat, refused"
)


@dataclass(frozen=True)
class Token:
    """A stored token (never its text): its id, its user (None for an app token) and whether it is an app's."""

    id: int
    user_id: int | None
    app: bool
    label: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "user_id": self.user_id,
            "app": self.app,
            "label": self.label,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "revoked": self.revoked_at is not None,
        }


def _token(row: dict[str, Any]) -> Token:
    return Token(
        row["id"],
        row["user_id"],
        bool(row["app"]),
        row["label"] or "",
        row["created_at"],
        row["last_used_at"],
        row["revoked_at"],
    )


class Tokens:
    """Making, finding, listing and revoking API tokens."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def create(self, user_id: int | None, *, app: bool = False, label: str = "") -> tuple[Token, str]:
        """A new token for `user_id` (or, with `app`, for no one user): the stored record and the token itself,
        which is never stored and cannot be shown again."""
        if app == (user_id is not None):
            raise InputError("a token is either a user's (give the user) or an app's (--app), not both or neither")
        token = PREFIX + secrets.token_urlsafe(32)
        row = {
            "hash": token_hash(token),
            "user_id": user_id,
            "app": 1 if app else 0,
            "label": label[:100],
            "created_at": now_iso(),
        }
        with self.conn.write():
            token_id = self.conn.insert("api_tokens", row)
        found = self.conn.one("select * from api_tokens where id = ?", [token_id])
        assert found is not None
        return _token(found), token

    def verify(self, token: str) -> Token | None:
        """The live token a request presented, or None (unknown, revoked, or its user forgotten)."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        row = self.conn.one("select * from api_tokens where hash = ? and revoked_at is null", [token_hash(token)])
        return _token(row) if row is not None else None

    def used(self, token_id: int) -> None:
        with self.conn.write():
            self.conn.execute("update api_tokens set last_used_at = ? where id = ?", [now_iso(), token_id])

    def take(self, token_id: int, user: str | None, per_min: int, now: float) -> float:
        """One request of a token's caller (`user`: the user an app token names; None for a user's token) at `now`
        (epoch seconds) against `per_min` requests a minute, a burst of as many: 0.0 when it is let in, else the
        seconds until one would be. Counted in the store in one atomic statement, so every app process of the store
        (any machine) shares one count: N processes still let in `per_min` a minute, not N times it."""
        interval = 60.0 / max(1, per_min)
        burst = 60.0 - interval
        params = [token_id, caller_key(user), now + interval, now, burst, now, burst, now, now + interval, interval]
        row = self.conn.atomic_counter(TAKE, params)[0]
        return max(0.0, float(row["tat"]) - now - burst) if row["refused"] else 0.0

    def prune_rates(self, now: float) -> int:
        """Drop the rate counters of callers whose bucket is full again (a missing row counts the same): how many."""
        with self.conn.write():
            return self.conn.execute("delete from api_rates where tat < ?", [now])

    def all(self, user_id: int | None = None) -> list[Token]:
        if user_id is None:
            rows = self.conn.rows("select * from api_tokens order by id")
        else:
            rows = self.conn.rows("select * from api_tokens where user_id = ? order by id", [user_id])
        return [_token(r) for r in rows]

    def revoke(self, token_id: int) -> Token:
        """Revoke a token by id (`keem token list` shows them); it never works again."""
        with self.conn.write():
            row = self.conn.one("select * from api_tokens where id = ?", [token_id])
            if row is None:
                raise InputError(f"no API token {token_id}; see them with: keem token list")
            if row["revoked_at"] is None:
                self.conn.execute("update api_tokens set revoked_at = ? where id = ?", [now_iso(), token_id])
        found = self.conn.one("select * from api_tokens where id = ?", [token_id])
        assert found is not None
        return _token(found)
