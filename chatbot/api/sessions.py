"""Each user's open API conversation, kept by the server: a client sends the whole conversation as OpenAI clients do,
and only its last user message is a new turn. A session opens with the user's first message (in a user trial, when
the study allows a session now, with the study's strategy and its rules on the first message: AppContext.ruled), the
worker ends it when idle, and POST /v1/sessions/end ends it at once.

The conversation and the keys live in the store (memory/store/api_state.py), not in this process: any app process
answers any caller, and a restart forgets nothing. Each request finds the user's open conversation there and goes
on from its stored turns (a conversation this process answered last, unchanged since, keeps its pinned memory, so
its prompts stay byte-stable). A request sent with an `Idempotency-Key` header is remembered (per user, the last
KEYS_PER_USER keys; the key's hash, ids and a digest of the request's body, never its text): the same request sent
again, by a client that lost the answer and retried, to any process, stores nothing twice (Attempt); the same key
with another body is refused (idempotency_key_reused)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from pydantic import BaseModel

from chatbot.session import ChatSession
from chatbot.study import assign_strategy
from chatbot.web.backend import AppContext
from memory.store.api_state import KEYS_PER_USER, Attempt
from models.errors import AccessError, InputError

__all__ = ["KEYS_PER_USER", "ApiSessions", "Attempt", "body_digest"]

WAIT_S = 120.0  # how long a request waits for the same user's reply streaming now (in this process)
KEY_MAX_CHARS = 255
T = TypeVar("T")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def body_digest(endpoint: str, body: BaseModel, ignore: tuple[str, ...] = ()) -> str:
    """What a retry under the same Idempotency-Key must send again: the request's body as parsed (every field, those
    the API ignores included; key order and spacing aside), less `ignore` (how the answer travels: `stream`, which a
    client that lost a stream half-way may ask again without), and the endpoint (one key on two endpoints is two
    requests)."""
    fields = body.model_dump(mode="json", exclude=set(ignore))
    return digest(endpoint + " " + json.dumps(fields, ensure_ascii=False, sort_keys=True, separators=(",", ":")))


class ApiSessions:
    """Each user's open API conversation (found in the store) as a ChatSession; one request of a user at a time in
    this process."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._open: dict[int, ChatSession] = {}  # user id -> the session this process built last (a cache)
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, user_id: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(user_id, threading.Lock())

    def acquire(self, user_id: int) -> threading.Lock:
        """The user's turn: held while their message is stored and answered (released by the caller, maybe from
        another thread when a stream ends); a request waiting past WAIT_S is refused with rate_limited."""
        lock = self._lock(user_id)
        if not lock.acquire(timeout=WAIT_S):
            raise AccessError(
                "another request of this user is still being answered; retry when it is done",
                code="rate_limited",
                retry_after=5,
            )
        return lock

    @contextlib.contextmanager
    def turn(self, user_id: int) -> Iterator[None]:
        lock = self.acquire(user_id)
        try:
            yield
        finally:
            lock.release()

    def current(self, user_id: int, name: str) -> ChatSession:
        """The user's open API session, or a new one (call it holding the user's turn)."""
        ctx = self.ctx
        store = ctx.bot.store
        session_id = store.api.open_session(user_id)
        if session_id is None:
            ctx.may_start(user_id)  # a study's gap between sessions
            strategy = assign_strategy(store, user_id, ctx.study) if ctx.study is not None else None
            strategy = ctx.bot.strategy_for(user_id, strategy)
            session_id, _ = store.api.open_or_start(user_id, strategy, ctx.bot.chat_model.spec)
        return self._session(user_id, name, session_id)

    def _session(self, user_id: int, name: str, session_id: int) -> ChatSession:
        """The stored session as a ChatSession: the one this process holds when nothing was stored in it since
        (by another process), else one built from its turns."""
        fresh = self.ctx.bot.session_of(user_id, name, session_id)
        held = self._open.get(user_id)
        if (
            held is not None
            and not held.ended
            and held.session_id == session_id
            and (held.history, held.replying_to, held.last_reply)
            == (fresh.history, fresh.replying_to, fresh.last_reply)
        ):
            return held
        session = self.ctx.ruled(fresh)
        self._open[user_id] = session
        return session

    def record(self, user_id: int, name: str, text: str) -> ChatSession:
        """Store the user's new message in their open API session (a new session when none is open), holding their
        turn; a session the worker ended as idle just now is followed by a new one, not refused."""
        return self._into_open(user_id, name, lambda session: session.record(text))[0]

    def record_turns(self, user_id: int, name: str, turns: Sequence[tuple[str, str]]) -> tuple[ChatSession, list[int]]:
        """Store turns said with another program's own model in the user's open API session, as `record` does."""
        return self._into_open(user_id, name, lambda session: session.record_turns(turns))

    def _into_open(self, user_id: int, name: str, store: Callable[[ChatSession], T]) -> tuple[ChatSession, T]:
        session = self.current(user_id, name)
        if session.ended:  # ended between the look and the store (the idle timeout, a shutdown)
            session = self.current(user_id, name)
        try:
            return session, store(session)
        except InputError:
            if not session.ended:
                raise
            session = self.current(user_id, name)
            return session, store(session)

    def attempt(self, user_id: int, key: str, sent: str) -> Attempt | None:
        """The earlier request of this user sent with `key` (call it holding the user's turn); None: a new key. The
        same key with another body (`sent`: its body_digest) is an InputError: a client bug that must not store or
        answer anything."""
        if not key or len(key) > KEY_MAX_CHARS or not key.isprintable():
            raise InputError(
                f"Idempotency-Key must be 1 to {KEY_MAX_CHARS} printable characters, e.g. a UUID made per message",
                code="bad_body",
                detail="Idempotency-Key",
            )
        earlier = self.ctx.bot.store.api.attempt(user_id, key)
        if earlier is not None and earlier.digest != sent:
            raise InputError(
                "this Idempotency-Key was sent before with another request body (another message, conversation, "
                "model or option); nothing was stored: a retry must send the same body again, and each new message "
                "needs a new key",
                code="idempotency_key_reused",
            )
        return earlier

    def remember(self, user_id: int, key: str, attempt: Attempt) -> Attempt:
        """Keep the request just stored under `key` in the store (holding the user's turn)."""
        self.ctx.bot.store.api.remember(user_id, key, attempt)
        return attempt

    def replied(self, user_id: int, key: str, attempt: Attempt, reply_id: int | None) -> None:
        """The reply now stored for the request under `key` (None: none; it failed before anything streamed)."""
        attempt.reply_id = reply_id
        self.ctx.bot.store.api.replied(user_id, key, reply_id)

    def stored_reply(self, attempt: Attempt) -> str | None:
        """The whole reply stored for the attempt's message; None when there is none to give again (none stored,
        or one cut short: stopped because the client left, failed, replaced)."""
        if attempt.reply_id is None:
            return None
        rows = self.ctx.bot.store.turns.of_session(attempt.session_id, replaced=True)
        row = next((r for r in rows if r["id"] == attempt.reply_id), None)
        return row["text"] if row is not None and not row.get("mark") else None

    def _open_now(self, user_id: int, name: str, attempt: Attempt) -> ChatSession | None:
        """The user's open API session when it is the attempt's (the conversation it was stored in), else None."""
        session_id = self.ctx.bot.store.api.open_session(user_id)
        if session_id is None or session_id != attempt.session_id:
            return None
        return self._session(user_id, name, session_id)

    def awaiting(self, user_id: int, name: str, attempt: Attempt) -> ChatSession | None:
        """The open session, when the attempt's last stored message is still the one a reply is due for (turns
        stored for another program's own model: chatbot/api/messages.py); else None."""
        if attempt.turn_id is None:
            return None
        session = self._open_now(user_id, name, attempt)
        if session is None or session.ended:
            return None
        due = session.replying_to == attempt.turn_id
        return session if due and session.history and session.history[-1]["role"] == "user" else None

    def again(self, user_id: int, name: str, attempt: Attempt) -> ChatSession:
        """The open session, ready to answer the attempt's message again (it is stored; its reply is missing or
        cut): the cut reply stays stored marked 'replaced'. An InputError when the conversation has moved on or
        ended since: that message cannot be answered in its place any more."""
        session = self._open_now(user_id, name, attempt)
        if session is None or session.ended:
            raise InputError(
                "this request's message is stored, but its session has ended since, before a whole answer; "
                "send it again with a new Idempotency-Key to continue in a new session",
                code="idempotency_stale",
            )
        if session.replying_to != attempt.turn_id:
            raise InputError(
                "this request's message is stored, but the conversation has moved on since, before a whole "
                "answer; send it again with a new Idempotency-Key",
                code="idempotency_stale",
            )
        session.redo()
        return session

    def end(self, user_id: int, reason: str = "user") -> tuple[int | None, int | None]:
        """End the user's open API session now, whichever process opened it: (its id, its update job's id);
        (None, None) without one."""
        with self.turn(user_id):
            session_id = self.ctx.bot.store.api.open_session(user_id)
            held = self._open.pop(user_id, None)
            if session_id is None:
                return None, None
            name = held.user_name if held is not None else ""
            session = self._session(user_id, name, session_id)
            self._open.pop(user_id, None)
            return session.session_id, self.ctx.worker.end(session, reason)

    def drop(self, user_id: int) -> None:
        """The user is being forgotten: their open session ends with nothing queued for it (its rows, and the
        keys', go with the user: memory/store/users.py Users.delete)."""
        with self.turn(user_id):
            session = self._open.pop(user_id, None)
            if session is not None and not session.ended:
                session.ended = True
                self.ctx.worker.end(session, "forget")
