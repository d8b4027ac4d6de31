"""A browser tab's server-side state (who is here, their live session, the messages waiting), and the small
protocol through which other parts of the page (chatbot/trials/web.py) log a visitor in."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from chatbot.session import ChatSession

if TYPE_CHECKING:
    import gradio as gr

    from chatbot.bot import Chatbot
    from chatbot.web.view import PageView


@dataclass
class Answering:
    """The message being answered now: its session, the history length before it, and the reply so far."""

    session: ChatSession
    base: int
    text: str
    reply: str = ""


@dataclass
class UserState:
    """One browser tab's identity and live session, held by Gradio on the server (never sent to the client).

    A message sent while nothing streams is stored at once (`awaiting` its reply); `pending` holds messages typed
    while a reply streams, stored when their turn comes. One `respond` at a time answers them in order.
    """

    user_id: int
    name: str
    session: ChatSession
    job_id: int | None = None
    pending: list[str] = field(default_factory=list)
    awaiting: bool = False  # the last user turn is stored and its reply not yet begun
    answering: bool = False
    current: Answering | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def take_pending(self) -> list[str]:
        """Remove and return every message still waiting (the tab logs out, forgets, or ends the session)."""
        with self.lock:  # a stored message awaiting its reply stays in its session's record
            taken, self.pending, self.awaiting = self.pending, [], False
        return taken


@dataclass(frozen=True)
class Identity:
    """Who is logging in: the name, the per-browser key (KEEM_IDENTITY=browser) and whether it is a signed-in
    Hugging Face account; the store's user is Chatbot.user_key of these."""

    name: str
    browser_key: str | None
    hf_user: bool


class Entrance(Protocol):
    """How a visitor gets in (chatbot/web/chat.py Entry): what a user trial's page needs of the chat page."""

    @property
    def bot(self) -> Chatbot: ...

    def identify(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
    ) -> Identity: ...

    def login(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
        strategy: str | None = None,
    ) -> PageView: ...
