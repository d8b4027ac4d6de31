"""A browser tab's server-side state (who is here, their live session, the messages waiting), and the small
protocol through which other parts of the page (chatbot/trials/web.py) log a visitor in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from chatbot.session import ChatSession

if TYPE_CHECKING:
    import gradio as gr

    from chatbot.bot import Chatbot
    from chatbot.web.view import PageView

R = TypeVar("R")


@dataclass
class Answering:
    """The message being answered now: its session, its index in the history, and the reply so far."""

    session: ChatSession
    base: int
    text: str
    reply: str = ""

    def stored(self) -> bool:
        """Whether the reply is in the session's history already (it is stored when it ends)."""
        history = self.session.history
        return self.base + 1 < len(history) and history[self.base + 1]["role"] == "assistant"


@dataclass
class Failure:
    """A reply the model could not give: to which user message of which session (`nth`: its place among the
    session's user messages, which stays when replies are added or taken out around it; `turn`: its stored id),
    what streamed before it failed (`cut`: that reply's stored id, marked 'failed' and shown before the notice;
    None: nothing streamed), the Korean notice, and the technical line (English, as logged) shown folded away.
    `open` while no reply came after it: 다시 보내기 answers it again (chatbot/web/replies.py)."""

    session: ChatSession
    nth: int
    turn: int | None
    cut: int | None
    text: str
    detail: str
    open: bool = True


@dataclass
class UserState:
    """One browser tab's identity and live session, held by Gradio on the server (never sent to the client).

    Every message is stored the moment it is sent: one sent while nothing streams is `awaiting` its reply; one
    typed while a reply streams waits, stored, in the session's queue (ChatSession.queued). One `respond` at a time
    answers them in order.

    Its fields change only through its methods below (tests/test_layers.py checks that no other module assigns
    them): the flags that decide whether a message is answered (`awaiting`, `answering`, `retrying`) are read and
    changed together under `lock`, so a message is never lost nor answered twice.
    """

    user_id: int
    name: str
    session: ChatSession
    job_id: int | None = None
    watcher: int = 0  # the newest event following the update's progress (Flow.watch): an older one stops
    awaiting: bool = False  # the last user turn is stored and its reply not yet begun
    answering: bool = False
    current: Answering | None = None
    # the replies that failed in this tab, each shown inline where it would be (notices.py); those being answered
    # again (다시 보내기), oldest first, wait in `retrying` until `respond` takes them
    failures: list[Failure] = field(default_factory=list)
    retrying: list[Failure] = field(default_factory=list)
    stopping: bool = False  # the user pressed stop: the reply streaming now ends after its next piece
    # a reply whose stream Gradio ended half-way (the tab closed, not 멈추기): it streams on to its end (`leave`)
    left: Generator[str, None, Any] | None = field(default=None, repr=False, compare=False)
    seen: list[str] = field(default_factory=list)  # stages the ended session's update was seen in (ending.py)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # what the memory tab's changelog showed (chatbot/web/why.py): its version and its dropped sentences' ids
    shown_changes: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def pending(self) -> list[str]:
        """The messages stored while a reply streamed, still waiting for theirs, oldest first."""
        return [text for _, text in self.session.queued]

    @property
    def busy(self) -> bool:
        """A reply (or the opening question) streams now, or one is about to: a message waits for its reply, or a
        failed one is to be answered again."""
        return (
            self.answering
            or self.awaiting
            or self.current is not None
            or bool(self.retrying)
            or bool(self.session.queued)
        )

    def claim(self) -> bool:
        """Take the tab's one answering turn (replies and the opening question stream one at a time); False: a
        `respond` (or the opening) holds it, and answers what waits too."""
        with self.lock:
            if self.answering:
                return False
            self.answering = True
            return True

    def begin_reply(self, session: ChatSession, at: int, text: str) -> Answering:
        """A reply to the history's message `at` (`text`; "" for the opening) streams now: the chat shows it."""
        self.current = Answering(session, at, text)
        return self.current

    def end_reply(self) -> None:
        """The reply streaming ended (answered, stopped or failed): a stop pressed for it is spent."""
        self.current, self.stopping = None, False

    def finish(self) -> None:
        """The answering turn ends: nothing streams for this tab until the next `claim`."""
        with self.lock:
            self.answering = False
            self.end_reply()

    def stop(self) -> bool:
        """멈추기: the reply streaming now (or the one about to) ends after its next piece; False: nothing to stop."""
        with self.lock:
            if not self.busy:
                return False
            self.stopping = True
            return True

    def leave(self, replying: Generator[str, None, Any]) -> None:
        """Gradio ended the tab's stream while a reply streamed (the tab closed; 멈추기 ends a reply otherwise): the
        reply is not stopped but left for the answering turn to stream to its end (`take_left`), stored whole."""
        self.left = replying

    def take_left(self) -> Generator[str, None, Any] | None:
        """The reply `leave` left half-way, once (None: none)."""
        left, self.left = self.left, None
        return left

    def claim_opening(self, due: Callable[[ChatSession], R | None]) -> tuple[ChatSession, R] | None:
        """`claim` for the opening question of a fresh session (nothing said, not ended, nothing streaming) when
        `due` gives one, checked and taken in one step under `lock`: a message sent meanwhile is stored and waits
        for the `respond` after the opening. None: nothing taken."""
        with self.lock:
            session = self.session
            if self.answering or session.ended or session.history:
                return None
            record = due(session)
            if record is None:
                return None
            self.answering = True
            return session, record

    def await_reply(self) -> None:
        """Under `lock` (with the message's storing): the history's last message, stored, awaits its reply (one sent
        while nothing streamed, or asked again with 다시 생성); the chained `respond` answers it."""
        self.awaiting = True

    def give_back(self, retry: Failure | None) -> None:
        """Undo a `next_reply` whose reply never began (the tab closed: Gradio ended its stream in between): the
        message awaits its reply again (`retry`: the failed one goes back to the front of those to answer again),
        for the next answering turn; a closed tab's is chatbot/web/chat.py Entry._close."""
        with self.lock:
            if retry is None:
                self.awaiting = True
            else:
                self.retrying.insert(0, retry)

    def next_reply(self, retries: bool = True) -> tuple[ChatSession, Failure | None] | None:
        """What the tab's answering turn answers next, checked and taken in one step under `lock` (a message stored
        after it is the next call's): the message awaiting its reply, else (`retries`) the oldest failed one to
        answer again, else the oldest queued one (it joins the history). None: nothing waits, and the turn ends in
        the same step, so a message stored just after finds the tab idle and starts a `respond` of its own."""
        with self.lock:
            session = self.session
            if self.awaiting:
                self.awaiting = False
                return session, None
            if retries and self.retrying and not session.ended:
                return session, self.retrying.pop(0)
            if session.ended or session.take_queued() is None:
                self.answering = False
                return None
            return session, None

    def reply_failed(self, notice: Failure) -> None:
        """A reply failed: its notice shows in its place; notices of the tab's earlier sessions go."""
        self.failures = [f for f in self.failures if f.session is notice.session] + [notice]

    def answer_again(self, failed: list[Failure]) -> None:
        """다시 보내기 (under `lock`): the failed messages leave the notices and wait for `respond`, oldest first."""
        self.failures = [f for f in self.failures if not any(f is g for g in failed)]
        self.retrying = sorted(failed, key=lambda f: f.nth)

    def next_session(self, session: ChatSession) -> None:
        """The tab's last session ended: its messages go to `session` now."""
        self.session = session

    def follow(self, job_id: int | None) -> None:
        """The progress line follows this memory update job (None: there is none to follow)."""
        self.job_id = job_id

    def watch(self) -> int:
        """A new event follows this tab's update; the one before it, if any, stops (its number is no longer newest)."""
        self.watcher += 1
        return self.watcher

    def follow_first(self, job_id: int) -> None:
        """Follow `job_id` unless an update is followed already (updates run oldest first: the first one shows)."""
        if self.job_id is None:
            self.job_id = job_id

    def job_done(self) -> None:
        """The followed update finished, failed, or is gone (with its user): the progress line follows none."""
        self.job_id = None

    def saw(self, stage: str | None) -> None:
        """The ended session's update was seen in `stage` (the card lists each once, in order); None: a new card,
        nothing seen yet."""
        if stage is None:
            self.seen = []
        elif stage not in self.seen:
            self.seen.append(stage)

    def showed_changes(self, version: int | None = None, drops: Sequence[int] = ()) -> None:
        """What the memory tab's changelog shows now, which its undo buttons act on: the latest version's number and
        the ids of the dropped sentences it offers back; no version: no memory yet, nothing to act on."""
        self.shown_changes = {} if version is None else {"version": version, "drops": list(drops)}

    def take_pending(self) -> list[str]:
        """Answer nothing more for this tab (it logs out, forgets, or ends the session): the messages still waiting
        stay stored in their session, unanswered (a failed one to be answered again keeps its notice). Returns the
        texts of those never answered."""
        with self.lock:
            taken = self.pending
            self.session.queued.clear()
            self.awaiting = False
            self.failures += self.retrying
            self.retrying.clear()
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
