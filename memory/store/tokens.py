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
