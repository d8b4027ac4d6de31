"""Each user's open API conversation, kept by the server: a client sends the whole conversation as OpenAI clients do,
and only its last user message is a new turn. A session opens with the user's first message (in a user trial, when
the study allows a session now, with the study's strategy and its rules on the first message: AppContext.track), the
worker ends it when idle, and POST /v1/sessions/end ends it at once.

A chat request sent with an `Idempotency-Key` header is remembered (per user, the last KEYS_PER_USER keys; ids and a
digest of the request's body, never its text): the same request sent again, by a client that lost the answer and
retried, stores nothing twice (Attempt); the same key with another body is refused (idempotency_key_reused)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from chatbot.session import ChatSession
from chatbot.study import assign_strategy
from chatbot.web.backend import AppContext
from models.errors import AccessError, InputError

WAIT_S = 120.0  # how long a request waits for the same user's reply streaming now
KEYS_PER_USER = 64  # Idempotency-Keys remembered per user (a retry comes seconds later, not 64 messages later)
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


@dataclass
class Attempt:
    """A request sent with an Idempotency-Key: its body's digest (body_digest), the user turn it stored, and the
    reply stored for it (None: none yet, or the reply failed before anything streamed)."""

    digest: str
    session_id: int
    turn_id: int | None
    reply_id: int | None = None
    turn_ids: tuple[int, ...] = ()  # POST /v1/sessions/messages: the turns it stored


class ApiSessions:
    """user id -> the open ChatSession of their API conversation; one request of a user at a time."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._open: dict[int, ChatSession] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()
        self._attempts: dict[int, OrderedDict[str, Attempt]] = {}

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
        session = self._open.get(user_id)
        if session is not None and not session.ended:
            return session
        ctx = self.ctx
        ctx.may_start(user_id)  # a study's gap between sessions
        strategy = assign_strategy(ctx.bot.store, user_id, ctx.study) if ctx.study is not None else None
        session = ctx.track(ctx.bot.begin(user_id, name, strategy))
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
        earlier = self._attempts.get(user_id, OrderedDict()).get(key)
        if earlier is not None and earlier.digest != sent:
            raise InputError(
                "this Idempotency-Key was sent before with another request body (another message, conversation, "
                "model or option); nothing was stored: a retry must send the same body again, and each new message "
                "needs a new key",
                code="idempotency_key_reused",
            )
        return earlier

    def remember(self, user_id: int, key: str, attempt: Attempt) -> Attempt:
        """Remember the request just stored under `key` (holding the user's turn)."""
        keys = self._attempts.setdefault(user_id, OrderedDict())
        keys[key] = attempt
        while len(keys) > KEYS_PER_USER:
            keys.popitem(last=False)
        return attempt

    def stored_reply(self, attempt: Attempt) -> str | None:
        """The whole reply stored for the attempt's message; None when there is none to give again (none stored,
        or one cut short: stopped because the client left, failed, replaced)."""
        if attempt.reply_id is None:
            return None
        rows = self.ctx.bot.store.turns.of_session(attempt.session_id, replaced=True)
        row = next((r for r in rows if r["id"] == attempt.reply_id), None)
        return row["text"] if row is not None and not row.get("mark") else None

    def awaiting(self, user_id: int, attempt: Attempt) -> ChatSession | None:
        """The open session, when the attempt's last stored message is still the one a reply is due for (turns
        stored for another program's own model: chatbot/api/messages.py); else None."""
        session = self._open.get(user_id)
        if session is None or session.ended or attempt.turn_id is None:
            return None
        due = session.session_id == attempt.session_id and session.replying_to == attempt.turn_id
        return session if due and session.history and session.history[-1]["role"] == "user" else None

    def again(self, user_id: int, attempt: Attempt) -> ChatSession:
        """The open session, ready to answer the attempt's message again (it is stored; its reply is missing or
        cut): the cut reply stays stored marked 'replaced'. An InputError when the conversation has moved on or
        ended since: that message cannot be answered in its place any more."""
        session = self._open.get(user_id)
        if session is None or session.ended or session.session_id != attempt.session_id:
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
        """End the user's open API session now: (its id, its update job's id); (None, None) without one."""
        with self.turn(user_id):
            session = self._open.pop(user_id, None)
            if session is None or session.ended:
                return None, None
            return session.session_id, self.ctx.worker.end(session, reason)

    def drop(self, user_id: int) -> None:
        """The user is being forgotten: their open session ends with nothing queued for it."""
        with self.turn(user_id):
            self._attempts.pop(user_id, None)
            session = self._open.pop(user_id, None)
            if session is not None and not session.ended:
                session.ended = True
                self.ctx.worker.end(session, "forget")
