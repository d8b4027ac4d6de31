"""Each user's open API conversation, kept by the server: a client sends the whole conversation as OpenAI clients do,
and only its last user message is a new turn. A session opens with the user's first message (in a user trial, when
the study allows a session now, with the study's strategy and its rules on the first message: AppContext.track), the
worker ends it when idle, and POST /v1/sessions/end ends it at once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from chatbot.session import ChatSession
from chatbot.study import assign_strategy
from chatbot.web.backend import AppContext
from models.errors import AccessError, InputError

WAIT_S = 120.0  # how long a request waits for the same user's reply streaming now


class ApiSessions:
    """user id -> the open ChatSession of their API conversation; one request of a user at a time."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._open: dict[int, ChatSession] = {}
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
        session = self.current(user_id, name)
        if session.ended:  # ended between the look and the store (the idle timeout, a shutdown)
            session = self.current(user_id, name)
        try:
            session.record(text)
        except InputError:
            if not session.ended:
                raise
            session = self.current(user_id, name)
            session.record(text)
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
            session = self._open.pop(user_id, None)
            if session is not None and not session.ended:
                session.ended = True
                self.ctx.worker.end(session, "forget")
