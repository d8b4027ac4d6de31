"""A browser tab's server-side state (who is here, their live session, the messages waiting), and the small
protocol through which other parts of the page (chatbot/trials/web.py) log a visitor in."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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
class Failure:
    """A reply the model could not give: after which turns of which session (`at`: the history's length then), the
    Korean notice, and the technical line (English, as logged) shown folded away."""

    session: ChatSession
    at: int
    text: str
    detail: str


@dataclass
class UserState:
    """One browser tab's identity and live session, held by Gradio on the server (never sent to the client).

    Every message is stored the moment it is sent: one sent while nothing streams is `awaiting` its reply; one
    typed while a reply streams waits, stored, in the session's queue (ChatSession.queued). One `respond` at a time
    answers them in order.
    """

    user_id: int
    name: str
    session: ChatSession
    job_id: int | None = None
    awaiting: bool = False  # the last user turn is stored and its reply not yet begun
    answering: bool = False
    current: Answering | None = None
    failure: Failure | None = None  # the last reply that failed, shown inline where it would be (notices.py)
    stopping: bool = False  # the user pressed stop: the reply streaming now ends after its next piece
    seen: list[str] = field(default_factory=list)  # stages the ended session's update was seen in (ending.py)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # what the memory tab's changelog showed (chatbot/web/why.py): its version and its dropped sentences' ids
    shown_changes: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def pending(self) -> list[str]:
        """The messages stored while a reply streamed, still waiting for theirs, oldest first."""
        return [text for _, text in self.session.queued]

    def take_pending(self) -> list[str]:
        """Answer nothing more for this tab (it logs out, forgets, or ends the session): the messages still waiting
        stay stored in their session, unanswered. Returns their texts."""
        with self.lock:
            taken = self.pending
            self.session.queued.clear()
            self.awaiting = False
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
