"""The chat page's handlers: who logs in (Entry) and the conversation (Conversation: send, streamed replies, end,
next session); ChatUI holds them with the memory tab's (chatbot/web/memory_tab.py)."""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import gradio as gr

from chatbot.bot import Chatbot
from chatbot.session import ChatSession, check_message, check_user_name
from chatbot.study import Study
from chatbot.web import identity as hf_login
from chatbot.web import toasts
from chatbot.web.actions import actions, hidden
from chatbot.web.backend import AppContext, Backend, for_user
from chatbot.web.calm import calm_notice
from chatbot.web.memory_tab import MemoryTab, panel
from chatbot.web.messages import korean_error
from chatbot.web.notices import STOPPED, failure, notices
from chatbot.web.render import md, render_hits, shown
from chatbot.web.state import Answering, Failure, Identity, UserState
from chatbot.web.used import render_used
from chatbot.web.view import PageView, signed_out
from chatbot.worker import Worker
from models.errors import InputError, KeemError, UserForgottenError

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 60.0  # how long a closed tab's reply may stream on before its waiting messages are answered here
BROWSER_KEY = re.compile(r"[0-9a-f]{32}")
PLACEHOLDER = "메시지를 입력하고 Enter"  # the message box's hint while a conversation is open
ENDED_ALREADY = "이미 끝난 대화입니다."


class Entry:
    """Logging in and out; each handler takes the server-side UserState, never a user id from the client."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    @property
    def bot(self) -> Chatbot:
        return self.ctx.bot

    def banner(self) -> PageView:
        """The model banner, its timer and the start button (page load and the banner timer's tick)."""
        return self.ctx.backend.banner_view()

    def on_unload(self, request: gr.Request) -> None:
        """The tab closed (or reloaded): its open conversation ends now, so 지난 대화 lists it and its memory update
        runs, not when Gradio drops the tab's state an hour later or the idle timeout comes."""
        state = self.ctx.tabs.pop(str(getattr(request, "session_hash", "")), None)
        self.on_state_deleted(state)

    def on_state_deleted(self, state: UserState | None) -> None:
        """The tab closed (Gradio dropped its state): the messages it left waiting are answered and the session
        ends, so its memory update runs, in a thread of its own (the unload answers at once)."""
        worker = self.ctx.backend.worker
        if isinstance(state, UserState) and not state.session.ended and worker is not None:
            # not `for_user`: a closed tab shows no notice; a forgotten user's session has nothing to end
            if self.ctx.lost(state) is None:
                threading.Thread(target=self._close, args=(state, worker), name="keem-closed-tab", daemon=True).start()

    def _close(self, state: UserState, worker: Worker) -> None:
        """Answer what a closed tab left waiting (a message sent, or typed while a reply streamed), then end its
        session: on return the user finds every message answered in 지난 대화. The tab's own reply loop, if it still
        runs (or the reply it left half-way, streaming on), is waited for (at most CLOSE_WAIT_S) and answers the
        queue itself; this one answers what is left by the same protocol (the tab's one answering turn: `claim`,
        `finish`)."""
        session, deadline = state.session, time.monotonic() + CLOSE_WAIT_S
        took = state.claim()
        while not took and time.monotonic() < deadline:
            time.sleep(0.1)
            took = state.claim()
        try:
            if took:
                answer_unseen(state, worker)
        finally:
            if took:
                state.finish()
            if not session.ended and self.ctx.lost(state) is None:  # quietly, as on_state_deleted
                worker.end(session, "closed")

    def identify(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
    ) -> Identity:
        """Who this login is: the authenticated user (auth on) wins, then a Hugging Face sign-in, then the typed
        name. With browser identity the user is the typed name in this browser: `browser_key` comes from the
        browser's localStorage, and a browser without one (or with a malformed one) gets a new random key."""
        username = getattr(request, "username", None) if request is not None else None
        account = None if username else hf_login.account(profile)  # signed in with Hugging Face
        name = check_user_name(username or account or name)
        key = None
        if self.ctx.browser_identity and not username and not account:
            key = browser_key if BROWSER_KEY.fullmatch(browser_key or "") else secrets.token_hex(16)
        return Identity(name, key, account is not None)

    def login(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
        strategy: str | None = None,
    ) -> PageView:
        """Start a session for the identity (see `identify`); with browser identity the view's `key` is the key for
        the browser's localStorage. `strategy`: a study's assignment (else the settings decide)."""
        who = self.identify(name, browser_key, request, profile)
        session = self.bot.start(who.name, strategy=strategy, browser_key=who.browser_key, hf_user=who.hf_user)
        self.ctx.track(session)
        state = UserState(session.user_id, who.name, session)
        if request is not None and getattr(request, "session_hash", None):
            self.ctx.tabs[str(request.session_hash)] = state
        view = (
            PageView(
                state=state,
                login_box=gr.update(visible=False),
                main_box=gr.update(visible=True),
                greeting=f"**{md(who.name)}** 님, 안녕하세요. 편하게 이야기해 주세요.",
                chat=[],
                hits=render_hits([]),
                message=gr.update(interactive=True, placeholder=PLACEHOLDER),
                progress="",
                again=gr.update(visible=False),
            )
            | panel(self.ctx, state)
            | hidden()
        )
        if self.ctx.browser_identity and not who.hf_user:  # a signed-in account leaves this browser's own key
            view.key = who.browser_key
        # an update of this user still under way (a restart's, another tab's or process's): the tab follows the
        # newest (Flow.watch, chained after the login), and its memory tab shows the version it makes
        waiting = self.bot.store.queue.jobs(session.user_id, statuses=("pending", "running"))
        if waiting:
            state.follow(waiting[-1]["id"])
        return view

    @for_user(signed_out)
    def logout(self, state: UserState) -> PageView:
        state.take_pending()  # leaving: nothing more is answered for this tab
        if not state.session.ended:
            self.ctx.worker.end(state.session, "logout")
        return signed_out()


class Conversation:
    """Sending, streamed replies, ending a conversation and starting the next one."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    @for_user()  # a forgotten user's message is not stored: the guard answers before the handler runs
    def send(self, text: str, state: UserState) -> PageView:
        """Accept a typed message: it is stored before the box is cleared (a refused one stays in the box with a
        Korean warning). One sent while a reply streams is stored too, and waits in the session's queue; the
        chained `respond` answers them in order, so nothing typed is dropped, even by a crash."""
        bot = self.ctx.bot
        try:  # the session's own check, here before the lock: a refused message stays in the box
            clean = check_message(text, bot.settings.max_message_chars, bot.chat_model)
        except InputError as exc:
            toasts.warning(korean_error(exc))
            return PageView()
        with state.lock:
            try:
                if state.session.ended:  # it opens the tab's next session: in a study, only when allowed
                    self.ctx.fresh_session(state)
                    toasts.info("이전 대화가 끝나 새 대화를 시작했습니다.")
                busy = state.busy
                state.session.record(clean, queued=busy)  # in a study, its first message must pass the rules
                if not busy:  # nothing streams: it is the history's last message, awaiting its reply
                    state.await_reply()
            except UserForgottenError:  # forgotten between the check and the insert: the wiring shows the notice
                raise
            except KeemError as exc:
                if (notice := calm_notice(exc)) is not None:  # a study's "not now": said inline, calmly
                    return PageView(note=notice)
                toasts.warning(refused(exc))
                return PageView()
        self.ctx.worker.touch(state.session)
        return PageView(message="", chat=rows(state), note=waiting_note(state)) | actions(state)

    @for_user(PageView)  # no login: nothing to answer; a forgotten user's tab: the notice and the start screen
    def respond(self, state: UserState) -> Iterator[PageView]:
        """Stream replies to the waiting messages, oldest first (chat, hits, note): a failed message to be answered
        again (다시 보내기) first, then the queue. It never touches the textbox, so a draft typed meanwhile stays. A
        second call while one is answering returns at once (the first one answers everything queued, including
        messages that arrive while it streams). The first and last frame of each reply set the reply actions
        (chatbot/web/actions.py): the last one's only once it is known whether another reply follows."""
        if not state.claim():
            yield PageView()
            return
        answered, last = False, None
        try:
            while True:
                taken = state.next_reply()  # checked and taken together: a message queued after this is another's
                if last is not None:  # the previous reply's last frame, and whether another streams now
                    try:
                        yield last | actions(state)
                    except GeneratorExit:  # the tab closed (Gradio ended this stream) with the message just taken
                        if taken is not None:  # not begun: it waits again, for the closed tab's end (Entry._close)
                            state.give_back(taken[1])
                        raise
                if taken is None:
                    break
                session, retry = taken
                last = yield from self._answer(state, session, retry)
                answered = True
        finally:
            if (left := state.take_left()) is None:
                state.finish()
            else:  # Gradio closes a stream on its event loop, which must not wait for a model: a thread of its own
                threading.Thread(target=self._finish_left, args=(state, left), name="keem-left-reply").start()
        if not answered:  # e.g. the message was refused: nothing to show
            yield PageView()

    def _finish_left(self, state: UserState, left: Generator[str, None, Any]) -> None:
        """The tab's answering turn after Gradio ended its stream half-way through a reply: that reply streams on to
        its end and the messages waiting are answered, each stored whole, before the turn ends (then a closed tab's
        Entry._close ends the conversation). Not a thread a process exit abandons: what streamed would be lost."""
        try:
            answer_unseen(state, self.ctx.worker, left)
        finally:
            state.finish()

    def _answer(
        self, state: UserState, session: ChatSession, retry: Failure | None = None
    ) -> Generator[PageView, None, PageView]:
        """Stream the reply to the session's last message (stored already), or to the failed one `retry` names;
        returns the reply's last frame (`respond` shows it)."""
        worker = self.ctx.worker
        worker.touch(session)
        at = len(session.history) - 1 if retry is None else session.user_index(retry.nth)
        if at is None:  # its message is gone with its user (a forget in another tab)
            return PageView(chat=rows(state))
        nth = sum(m["role"] == "user" for m in session.history[:at])
        turn = session.replying_to if retry is None else retry.turn
        current = state.begin_reply(session, at, str(session.history[at]["content"]))  # "…" until the first piece
        stopped = failed = left = False
        replying = session.reply(at=at, to=turn)
        try:
            # 멈추기: what was shown (and the last piece) is kept, stored as a stopped reply
            stopped = yield from stream_frames(self.ctx, state, current, replying, with_actions=True)
            replying.close()
        except GeneratorExit:  # Gradio ended the stream (the tab closed): nobody pressed 멈추기, so the reply goes on
            state.leave(replying)
            left = True
            raise
        except UserForgottenError:  # forgotten while it streamed: nothing of it is stored; the wiring tells the tab
            raise
        except Exception as exc:  # what streamed so far is already saved by the session; the chat shows a notice
            failed = True
            state.reply_failed(failure(exc, session, nth, turn, session.stored_reply))
        finally:
            if not left:
                replying.close()
            worker.touch(session)
            state.end_reply()
        if not failed:  # answered: the notices of messages before it offer no retry any more
            for earlier in state.failures:
                if earlier.session is session and earlier.nth < nth:
                    earlier.open = False
        note = STOPPED if stopped else waiting_note(state)
        return PageView(chat=rows(state), hits=render_used(self.ctx.bot, session), note=note)

    @for_user(lambda: PageView(state=None, progress=ENDED_ALREADY))
    def end_session(self, state: UserState, draft: str = "") -> PageView:
        """Queue the memory update and answer at once; Flow.watch, chained after this event, follows its progress.

        Messages still waiting for a reply stay stored in the ended conversation (its memory update reads them),
        unanswered; the draft in the box stays as it is.
        """
        if state.session.ended:
            return PageView(state=state, progress=ENDED_ALREADY)
        try:
            job_id = self.ctx.worker.end(state.session, "user")
        except KeemError as exc:  # nothing ended: the conversation goes on, and the page says why
            return PageView(state=state, progress=f"대화를 끝내지 못했습니다. {korean_error(exc)}")
        unanswered = state.take_pending()
        box = gr.update(interactive=False)  # the box's text (a draft) stays as it is
        state.follow(job_id)
        progress = "기억 갱신: 대기 중 … (백그라운드에서 진행됩니다. 계속 둘러보셔도 됩니다)"
        if job_id is None:
            progress = "나눈 말이 없어 기억은 그대로입니다."
        if unanswered:
            progress = f"답을 받지 못한 메시지 {len(unanswered)}개도 이 대화에 저장했습니다. {progress}"
        return PageView(
            state=state,
            progress=progress,
            message=box,
            again=gr.update(visible=True),
        ) | actions(state)  # nothing to ask again; 멈추기 stays while a reply still streams

    @for_user(lambda: PageView(state=None, chat=[], hits=""))
    def new_session(self, state: UserState) -> PageView:
        if not state.session.ended:
            self.ctx.worker.end(state.session, "user")
        try:
            self.ctx.fresh_session(state)
        except InputError as exc:  # a study's "not now": said inline, calmly
            if (notice := calm_notice(exc)) is None:
                raise
            return PageView(state=state, note=notice)
        return PageView(
            state=state,
            chat=[],
            message=gr.update(interactive=True),
            again=gr.update(visible=False),
            hits=render_hits([]),
            progress=gr.update() if state.job_id is not None else "",  # a running update keeps showing
        ) | actions(state)


def refused(exc: KeemError) -> str:
    """Why a message was not stored, in Korean: a user trial's rule as it is, a storage problem with the assurance
    that the typed text stays in the box."""
    if isinstance(exc, InputError):
        return korean_error(exc) if exc.code else str(exc)
    return f"메시지를 저장하지 못했습니다. 입력한 내용은 그대로 있습니다. {korean_error(exc)}"


def answer_unseen(state: UserState, worker: Worker, left: Generator[str, None, Any] | None = None) -> None:
    """Holding the tab's answering turn with no stream to show it on (the tab closed): the reply `left` half-way
    streams to its end, then every message waiting is answered in order, each stored whole. A failed one (and a
    reply that fails) stays stored unanswered with its notice, as 대화 끝내기 leaves them."""
    session = state.session
    try:
        if left is not None:
            for _piece in left:
                pass
        while state.next_reply(retries=False) is not None:
            worker.touch(session)
            for _piece in session.reply():
                pass
    except Exception:  # the model failed, or the user was forgotten meanwhile: what is stored stays
        log.warning("answering a closed tab's waiting messages failed", exc_info=True)
    finally:
        if left is not None:
            left.close()
        worker.touch(session)


def stream_frames(
    ctx: AppContext, state: UserState, current: Answering, pieces: Iterator[str], with_actions: bool = False
) -> Generator[PageView, None, bool]:
    """The one streaming loop of the chat (a reply, the opening question): each piece joins `current`, the chat is
    redrawn in frames paced by the app (chatbot/web/frames.py; the rest of a frame's pieces come with the next),
    the first frame with the reply actions when `with_actions`. Returns whether 멈추기 ended it (after the piece
    that came with it)."""
    first = with_actions
    with ctx.frames.stream() as due:
        for piece in pieces:
            current.reply += piece
            if state.stopping:
                return True
            if due():
                frame = PageView(chat=rows(state), note=waiting_note(state))
                yield frame | actions(state) if first else frame
                first = False
    return False


def rows(state: UserState) -> list[dict[str, Any]]:
    """The chat as shown: the session's turns with each failed reply's notice in its place, the reply streaming
    now (after its message), "…" for failed messages about to be answered again, then the messages still waiting."""
    session, current = state.session, state.current
    shown_rows = [shown(m) for m in session.history]
    idle = current is None and not state.pending and not state.awaiting and not state.retrying
    placed = notices(state, idle)
    if current is not None and current.session is session and not current.stored():
        placed.append((current.base + 1, [shown({"role": "assistant", "content": current.reply or "…"})]))
    for f in state.retrying:
        if f.session is session and (at := session.user_index(f.nth)) is not None:
            placed.append((at + 1, [{"role": "assistant", "content": "…"}]))
    for at, more in sorted(placed, key=lambda p: p[0], reverse=True):  # from the end: earlier places stay put
        shown_rows[at:at] = more
    waiting = list(state.pending)
    shown_rows += [shown({"role": "user", "content": t}) for t in waiting]
    if (waiting or state.awaiting) and current is None:  # its reply is about to begin
        shown_rows.append({"role": "assistant", "content": "…"})
    return shown_rows


def waiting_note(state: UserState) -> str:
    waiting = len(state.pending)
    if not waiting or state.current is None:
        return ""
    return f"⏳ 답변을 기다리는 메시지 {waiting}개: 지금 답변이 끝나면 보낸 순서대로 답합니다."


class ChatUI:
    """Every handler of the page, in three parts sharing one AppContext: `entry` (banner, login, logout), `chat`
    (send, replies, end, next conversation) and `memory` (the memory tab). With a `study` (a user trial) strategies
    are hidden and a tab's next session opens only when the study allows it."""

    def __init__(
        self,
        bot: Chatbot | Backend,
        worker: Worker | None = None,
        *,
        browser_identity: bool = False,
        study: Study | None = None,
    ):
        backend = bot if isinstance(bot, Backend) else Backend(bot, worker)
        self.ctx = AppContext(backend, browser_identity=browser_identity, study=study)
        self.entry, self.chat, self.memory = Entry(self.ctx), Conversation(self.ctx), MemoryTab(self.ctx)

    @property
    def backend(self) -> Backend:
        return self.ctx.backend

    @property
    def bot(self) -> Chatbot:
        return self.ctx.bot

    @property
    def worker(self) -> Worker:
        return self.ctx.worker

    @property
    def zero(self) -> Any:
        """ZeroGPU's functions (chatbot/deploy/zerogpu.py) on ZeroGPU, else None."""
        return self.ctx.zero
