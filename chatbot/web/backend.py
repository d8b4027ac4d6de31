"""The bot and its job worker behind the page: ready at once, or loading in a background thread while the page
already serves (the banner and the start button say so); and what every handler shares (AppContext)."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from chatbot.bot import Chatbot
from chatbot.deploy import zerogpu
from chatbot.session import BALANCED, ChatSession
from chatbot.study import Study, next_allowed, refusal
from chatbot.web.frames import Frames
from chatbot.web.messages import LOADING
from chatbot.web.render import md, model_banner, without_addresses
from chatbot.web.state import UserState
from chatbot.web.view import PageView, forgotten
from chatbot.worker import Worker
from models.errors import InputError, KeemError, ModelUnavailableError, UserForgottenError

log = logging.getLogger(__name__)


def warm_korean() -> None:
    """Load Kiwi and run its first analysis now: that first call holds the GIL for seconds (3-5 s on 2 cores).
    Left to the first update that needs it (a user's second session, maybe 4 updates at once) it stalled every
    request, logins included, for 5-11 s under 20 users; beside the model loading it delayed the page by 4-9 s."""
    try:
        from memory.korean import content_words

        content_words("사용자는 어제 부산으로 이사했다.")
    except Exception:
        log.warning("warming the Korean analyzer (Kiwi) failed", exc_info=True)


class Backend:
    """The bot and its job worker: ready at once, or loading in a background thread while the page already serves."""

    def __init__(self, bot: Chatbot | None = None, worker: Worker | None = None):
        self.bot, self.worker = bot, (worker or (Worker(bot) if bot is not None else None))
        self.error: BaseException | None = None
        self.done = threading.Event()
        if bot is not None:
            self.done.set()

    @classmethod
    def loading(cls, load: Callable[[], tuple[Chatbot, Worker]]) -> Backend:
        """Start `load` (models, then a started worker) in a thread; handlers answer "loading" until it finishes."""
        backend = cls()

        def run() -> None:
            try:
                backend.bot, backend.worker = load()
            except BaseException as exc:  # shown in the banner and on every action
                if isinstance(exc, KeemError):
                    log.error("loading the models failed: %s", exc)
                else:
                    log.exception("loading the models failed")
                backend.error = exc
            finally:
                backend.done.set()
            if backend.error is None:
                warm_korean()  # once chat is open: before any update needs it, after the start it would slow

        if zerogpu.active():  # ZeroGPU takes weights onto its GPU only from the main thread, before the launch
            run()
            return backend
        threading.Thread(target=run, name="keem-load", daemon=True).start()
        return backend

    def ready(self) -> tuple[Chatbot, Worker]:
        """The bot and worker; ModelUnavailableError (code models_loading while they still load) otherwise."""
        if self.error is not None:
            raise ModelUnavailableError(f"the models could not be loaded: {self.error}", code="models_failed")
        if not self.done.is_set() or self.bot is None or self.worker is None:
            raise ModelUnavailableError(
                "the models are still loading (a minute or two after the start); try again shortly",
                code="models_loading",
            )
        return self.bot, self.worker

    def banner(self) -> str:
        if self.error is not None:
            return f"**오류** 모델을 불러오지 못했습니다: {md(without_addresses(str(self.error)))}"
        if not self.done.is_set() or self.bot is None:
            return LOADING
        return model_banner(self.bot)

    def start_button(self) -> dict[str, Any]:
        """The start button's label and whether it takes clicks: only once the models are ready."""
        if self.error is not None:
            return {"value": "모델을 불러오지 못했습니다", "interactive": False}
        if not self.done.is_set() or self.bot is None:
            return {"value": "모델을 불러오는 중 …", "interactive": False}
        return {"value": "대화 시작", "interactive": True}

    def demo(self) -> bool:
        """Whether the loaded chat or update model is the offline demo (which cannot speak Korean)."""
        bot = self.bot if self.done.is_set() and self.error is None else None
        return bot is not None and "demo" in (bot.chat_model.spec, bot.update_model.spec)

    def info_label(self) -> str:
        """The label of the ⓘ that holds the banner: it says so when the demo model runs (the details on tap)."""
        return "ⓘ 모델 정보 · 데모 모델 (한국어를 하지 못합니다)" if self.demo() else "ⓘ 모델 정보"

    def banner_view(self) -> PageView:
        """The banner, its ⓘ's label, its timer (it ticks only while the models load) and the start button, which
        says it is loading and takes no click until the models are ready."""
        return PageView(
            model_info=gr.update(label=self.info_label()),
            banner=self.banner(),
            banner_timer=gr.Timer(active=not self.done.is_set()),
            start=gr.update(**self.start_button()),
            demo_box=gr.update(visible=self.demo()),
        )


class AppContext:
    """What every handler shares: the backend, the identity rule, a user trial's study and ZeroGPU's functions."""

    def __init__(self, backend: Backend, *, browser_identity: bool = False, study: Study | None = None):
        self.backend, self.browser_identity, self.study = backend, browser_identity, study
        self.zero = zerogpu.ZeroGPU(backend) if zerogpu.active() else None  # GPU work in GPU functions
        self.frames = Frames()  # the replies streaming in this process share a budget of frames
        # each open tab's state by its Gradio session, so that closing the tab ends its conversation at once
        # (chatbot/web/chat.py on_unload); Gradio itself drops a closed tab's state only an hour later
        self.tabs: dict[str, Any] = {}

    @property
    def bot(self) -> Chatbot:
        return self.backend.ready()[0]

    @property
    def worker(self) -> Worker:
        return self.backend.ready()[1]

    @property
    def blind(self) -> bool:
        """A trial participant must not learn their strategy."""
        return self.study is not None or self.bot.settings.strategy == BALANCED

    def gone(self, state: UserState | None) -> PageView | None:
        """Every event of a tab starts here: None when the tab's user and session still exist and belong together
        (one indexed lookup), else the tab's user was forgotten meanwhile (another tab, `keem memory forget` in
        another process): the Korean notice and the start screen (view.py `forgotten`), after the tab's waiting
        messages and live session are let go of, nothing stored and nothing queued for them."""
        lost = self.lost(state)
        return forgotten(lost) if lost is not None else None

    def lost(self, state: UserState | None) -> UserForgottenError | None:
        """`gone` without the notice: a closed tab's session is not ended for a user who is gone (chat.py
        Entry.on_state_deleted). Every event asks `gone` or `for_user`."""
        if state is None:
            return None
        try:
            self.bot.store.sessions.check(state.session.session_id, state.user_id)
        except UserForgottenError as exc:
            state.take_pending()
            state.session.ended = True  # no update is queued for a user who is gone
            state.job_done()
            return exc
        return None

    def may_start(self, user_id: int) -> None:
        """In a study, refuse (Korean, with the date) a next session the study does not allow yet (the page's next
        conversation, the HTTP API's)."""
        if self.study is not None:
            when = next_allowed(self.bot.store, user_id, self.study)
            if when is not None:
                raise refusal(when, self.bot.settings.local_time)

    def fresh_session(self, state: UserState) -> None:
        """The tab's next session: the same user and strategy as its last one."""
        self.may_start(state.user_id)
        state.next_session(self.track(self.bot.open_session(state.user_id, state.name, state.session.strategy)))

    def track(self, session: ChatSession) -> ChatSession:
        """A session this page opened: the worker ends it when idle; in a study its first message must pass the
        study's rules in the transaction that stores it (chatbot/study.py Study.admit)."""
        self.worker.track(self.ruled(session))
        return session

    def ruled(self, session: ChatSession) -> ChatSession:
        """In a study, the session's first message must pass the study's rules in the transaction that stores it
        (chatbot/study.py Study.admit), and it opens by the study's rule."""
        study = self.study
        if study is not None:
            local = self.bot.settings.local_time  # KEEM_TIMEZONE: a refusal's date
            session.gate = lambda s: study.admit(s.store, s.user_id, s.session_id, local)
            session.opening = study.opening  # the study's own opening rule, if it sets one
        return session


def for_user(absent: Callable[[], PageView] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The one guard of an event that acts for the tab's user (the handler's UserState argument; none: no login):
    without a login, the `absent` view (none given: refused, "먼저 대화를 시작하세요."); the start screen with its
    notice when the user was forgotten meanwhile (AppContext.gone); else the handler runs, given a state that is
    there. A handler that yields views (a generator) yields the refusal's view instead. The handler's owner has the
    `ctx`.

    Only the end of a closed tab's session checks the user itself, with AppContext.lost: it has no page to show the
    notice on."""

    def refusal(owner: Any, args: tuple[Any, ...]) -> PageView | None:
        state = next((a for a in args if isinstance(a, UserState)), None)
        if state is None:
            if absent is None:
                raise InputError("no conversation in this tab yet; start one first", code="not_started")
            return absent()
        return owner.ctx.gone(state)

    def guard(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(handler):

            @functools.wraps(handler)
            def streamed(owner: Any, *args: Any) -> Iterator[PageView]:
                refused = refusal(owner, args)
                if refused is not None:
                    yield refused
                    return
                yield from handler(owner, *args)

            return streamed

        @functools.wraps(handler)
        def guarded(owner: Any, *args: Any) -> PageView:
            refused = refusal(owner, args)
            return refused if refused is not None else handler(owner, *args)

        return guarded

    return guard
