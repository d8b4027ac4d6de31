"""The Gradio 6 browser app: Korean chat with visible memory; identity lives only in server-side session state."""

from __future__ import annotations

import functools
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import fastapi
import gradio as gr

from chatbot.bot import Chatbot
from chatbot.deploy import zerogpu
from chatbot.session import BALANCED, ChatSession, check_user_name, clean_message
from chatbot.trials.study import Study, next_allowed, refusal_message
from chatbot.trials.web import StudyUI
from chatbot.web import identity as hf_login
from chatbot.web.messages import LOADING, korean_error
from chatbot.web.render import (
    choices,
    md,
    model_banner,
    render_history,
    render_hits,
    render_jobs,
    render_memory,
    shown,
    stage_text,
)
from chatbot.worker import Worker
from memory.store import Sentence, Version
from memory.updaters.base import carry_over
from models.errors import InputError, KeemError, ModelUnavailableError

log = logging.getLogger(__name__)
BROWSER_KEY = re.compile(r"[0-9a-f]{32}")
# A streaming reply shows at most one frame per FRAME_S: every frame sends the chat again, and at a frame per token
# 20 users' replies kept the server busy enough to slow everyone's (the last pieces always show, in the final frame)
FRAME_S = 0.05


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


# -- the app -------------------------------------------------------------------------------------
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
        if self.error is not None:
            raise ModelUnavailableError(f"모델을 불러오지 못했습니다: {self.error}")
        if not self.done.is_set() or self.bot is None or self.worker is None:
            raise ModelUnavailableError(LOADING, code="model_loading")
        return self.bot, self.worker

    def banner(self) -> str:
        if self.error is not None:
            return f"**오류** 모델을 불러오지 못했습니다: {md(str(self.error))}"
        if not self.done.is_set() or self.bot is None:
            return LOADING
        return model_banner(self.bot)


@dataclass(frozen=True)
class Identity:
    """Who is logging in: the name, the per-browser key (KEEM_IDENTITY=browser) and whether it is a signed-in
    Hugging Face account; the store's user is Chatbot.user_key of these."""

    name: str
    browser_key: str | None
    hf_user: bool


class ChatUI:
    """Every event handler of the app; each takes the server-side UserState, never a user id from the client.

    With a `study` (a user trial, chatbot/trials/web.py) strategies are hidden and a tab's next session opens only
    when the study allows it."""

    def __init__(
        self,
        bot: Chatbot | Backend,
        worker: Worker | None = None,
        *,
        browser_identity: bool = False,
        study: Study | None = None,
    ):
        self.backend = bot if isinstance(bot, Backend) else Backend(bot, worker)
        self.browser_identity = browser_identity
        self.study = study
        self.login_outputs = 0  # how many outputs `login` gives on the page (build_app sets it)
        self.zero = zerogpu.ZeroGPU(self.backend) if zerogpu.active() else None  # GPU work in GPU functions

    @property
    def bot(self) -> Chatbot:
        return self.backend.ready()[0]

    @property
    def worker(self) -> Worker:
        return self.backend.ready()[1]

    # state lifecycle
    def on_state_deleted(self, state: UserState | None) -> None:
        """The tab closed (Gradio dropped its state): end the session so its memory update runs."""
        if isinstance(state, UserState) and not state.session.ended and self.backend.worker is not None:
            self.backend.worker.end(state.session, "closed")

    def banner(self) -> tuple[str, Any, Any]:
        """The model banner, the banner timer (it ticks only while the models load) and the start button, which
        says it is loading and takes no click until the models are ready."""
        backend = self.backend
        return backend.banner(), gr.Timer(active=not backend.done.is_set()), gr.update(**start_button(backend))

    @property
    def blind(self) -> bool:
        """A trial participant must not learn their strategy."""
        return self.study is not None or self.bot.settings.strategy == BALANCED

    def may_start(self, state: UserState) -> None:
        """In a study, refuse (Korean, with the date) a next session the study does not allow yet."""
        if self.study is not None:
            when = next_allowed(self.bot.store, state.user_id, self.study)
            if when is not None:
                raise InputError(refusal_message(when))

    def _fresh_session(self, state: UserState) -> None:
        """The tab's next session: the same user and strategy as its last one."""
        self.may_start(state)
        state.session = self.bot.open_session(state.user_id, state.name, state.session.strategy)
        self.worker.track(state.session)

    def memory_outputs(self, state: UserState | None) -> tuple[str, str, Any, Any]:
        """The memory tab: (updates not yet in memory, then the current memory; history; sentence picker; the
        retry button, shown while an update of this user's has failed)."""
        if state is None:
            return "", "", gr.update(choices=[], value=None), gr.update(visible=False)
        store = self.bot.store
        versions = store.versions(state.user_id)
        latest = versions[-1] if versions else None
        waiting = store.jobs(state.user_id, ("pending", "running", "failed"))
        jobs = render_jobs(waiting)
        return (
            f"{jobs}\n\n---\n\n{render_memory(latest)}" if jobs else render_memory(latest),
            render_history(versions, show_strategy=not self.blind),
            gr.update(choices=choices(latest), value=None),
            gr.update(visible=any(j["status"] == "failed" for j in waiting)),
        )

    @staticmethod
    def keep_panel() -> tuple[Any, ...]:
        """The memory tab's outputs left as they are (as many as `memory_outputs` gives)."""
        return tuple(gr.update() for _ in range(4))

    def retry_failed(self, state: UserState | None) -> tuple[Any, ...]:
        """Put this user's failed updates back in the queue now; the progress line then follows the newest one.
        Outputs as `poll`'s: (progress, timer, *memory tab)."""
        if state is None:
            raise InputError("먼저 대화를 시작하세요.")
        ids = self.bot.store.retry_jobs(user_id=state.user_id)
        if not ids:
            return ("다시 시도할 실패한 갱신이 없습니다.", gr.Timer(active=False), *self.memory_outputs(state))
        self.worker.notify()
        state.job_id = ids[-1]
        return (
            f"실패한 기억 갱신 {len(ids)}개를 다시 시도합니다 …",
            gr.Timer(active=True),
            *self.memory_outputs(state),
        )

    # login
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
        if self.browser_identity and not username and not account:
            key = browser_key if BROWSER_KEY.fullmatch(browser_key or "") else secrets.token_hex(16)
        return Identity(name, key, account is not None)

    def login(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
        strategy: str | None = None,
    ) -> tuple[Any, ...]:
        """Start a session for the identity (see `identify`); with browser identity the key is returned last, for
        the browser's localStorage. `strategy`: a study's assignment (else the settings decide)."""
        who = self.identify(name, browser_key, request, profile)
        name = who.name
        session = self.bot.start(name, strategy=strategy, browser_key=who.browser_key, hf_user=who.hf_user)
        self.worker.track(session)
        state = UserState(session.user_id, name, session)
        out: tuple[Any, ...] = (
            state,
            gr.update(visible=False),
            gr.update(visible=True),
            f"**{md(name)}** 님, 안녕하세요. 편하게 이야기해 주세요.",
            [],
            render_hits([]),
            gr.update(interactive=True),
            "",
            gr.update(visible=False),
            *self.memory_outputs(state),
        )
        if who.hf_user:  # this browser's own key stays for when it visits signed out
            return (*out, gr.skip()) if self.browser_identity else out
        return (*out, who.browser_key) if self.browser_identity else out

    def logout(self, state: UserState | None) -> tuple[Any, ...]:
        if state is not None:
            state.take_pending()  # leaving: nothing more is answered for this tab
        if state is not None and not state.session.ended:
            self.worker.end(state.session, "logout")
        return (None, gr.update(visible=True), gr.update(visible=False), "", [], "", "", *self.memory_outputs(None))

    # chat
    def send(self, text: str, state: UserState | None) -> tuple[Any, Any, Any]:
        """Accept a typed message: (textbox, chatbot, note). The box is cleared only when the message is accepted;
        a refused one stays in the box with a Korean warning. Accepted messages wait in `state.pending` and the
        chained `respond` answers them in order, so one sent while a reply streams is queued, never dropped."""
        if state is None:
            gr.Warning("먼저 이름을 입력하고 대화를 시작하세요.")
            return gr.update(), gr.update(), gr.update()
        try:
            clean = clean_message(text, self.bot.settings.max_message_chars)
            model = self.bot.chat_model
            need, window = model.count_tokens(clean), model.context_window
            if need > window // 2:  # the session would refuse it after the box was cleared: refuse it here
                raise InputError(
                    f"메시지가 이 모델에 너무 깁니다 ({need:,}토큰, 최대 {window // 2:,}토큰). 나누어 보내 주세요."
                )
            if state.session.ended:  # it would open the next session: in a study, only when allowed
                self.may_start(state)
        except InputError as exc:
            gr.Warning(korean_error(exc) if getattr(exc, "code", None) else str(exc))
            return gr.update(), gr.update(), gr.update()
        with state.lock:
            idle = not (state.answering or state.awaiting or state.pending) and not state.session.ended
            if idle:  # stored before the box is cleared: a message the disk cannot take stays in the box
                try:
                    state.session.record(clean)
                except KeemError as exc:
                    gr.Warning(f"메시지를 저장하지 못했습니다. 입력한 내용은 그대로 있습니다. {korean_error(exc)}")
                    return gr.update(), gr.update(), gr.update()
                state.awaiting = True
            else:
                state.pending.append(clean)
        if not state.session.ended:  # an ended one is replaced when this message's turn comes
            self.worker.touch(state.session)
        return "", self._view(state), self._note(state)

    def respond(self, state: UserState | None) -> Iterator[tuple[Any, Any, Any]]:
        """Stream replies to the waiting messages, oldest first: (chatbot, hits, note). It never touches the textbox,
        so a draft typed meanwhile stays. A second call while one is answering returns at once (the first one
        answers everything queued, including messages that arrive while it streams)."""
        if state is None:
            yield gr.skip(), gr.skip(), gr.skip()
            return
        with state.lock:
            if state.answering:
                yield gr.skip(), gr.skip(), gr.skip()
                return
            state.answering = True
        answered = 0
        try:
            while True:
                with state.lock:  # checked and released together: a message queued after this is another's
                    if state.awaiting:
                        state.awaiting, text, stored = False, str(state.session.history[-1]["content"]), True
                    elif state.pending:
                        text, stored = state.pending.pop(0), False
                    else:
                        state.answering = False
                        break
                if not (yield from self._answer(state, text, stored)):
                    break  # not stored (the disk is full): it waits again, shown, for the next send or end
                answered += 1
        finally:
            with state.lock:
                state.answering, state.current = False, None
        if not answered:  # e.g. the message was refused: nothing to show
            yield gr.skip(), gr.skip(), gr.skip()

    def _answer(self, state: UserState, text: str, stored: bool) -> Generator[tuple[Any, Any, Any], None, bool]:
        """Stream the reply to one message (`stored`: its user turn is already in the database); returns False
        when a queued message could not be stored, which then goes back to the front of the queue."""
        if state.session.ended:
            try:
                self._fresh_session(state)
            except InputError as exc:  # a study's gap: the message waits, shown, and nothing is lost
                with state.lock:
                    state.pending.insert(0, text)
                gr.Warning(str(exc))
                yield self._view(state), gr.update(), self._note(state)
                return False
            gr.Info("이전 대화가 끝나 새 대화를 시작했습니다.")
            stored = False
        session = state.session
        self.worker.touch(session)
        if not stored:
            try:
                session.record(text)
            except KeemError as exc:
                with state.lock:
                    state.pending.insert(0, text)
                gr.Warning(f"메시지를 저장하지 못했습니다. 보낼 때까지 기다리는 중입니다. {korean_error(exc)}")
                yield self._view(state), gr.update(), self._note(state)
                return False
        state.current = Answering(session, len(session.history) - 1, text)  # shown as "…" until the first piece
        try:
            shown_at = 0.0
            for piece in session.reply():
                state.current.reply += piece
                if time.monotonic() - shown_at >= FRAME_S:  # the rest of this frame's pieces come with the next
                    shown_at = time.monotonic()
                    yield self._view(state), gr.update(), self._note(state)
        except Exception as exc:  # what streamed so far is already saved by the session
            if not isinstance(exc, KeemError):
                log.exception("chat turn failed")
            gr.Warning(f"답변 생성 중 문제가 생겼습니다. {korean_error(exc)}")
        finally:
            self.worker.touch(session)
            state.current = None
        yield self._view(state), render_hits(session.last_hits), self._note(state)
        return True

    @staticmethod
    def _view(state: UserState) -> list[dict[str, Any]]:
        """The chat as shown: the session's turns, the reply streaming now, then the messages still waiting."""
        session, current = state.session, state.current
        rows = [shown(m) for m in session.history]
        if current is not None and current.session is session:
            added = len(session.history) - current.base  # 0: not yet recorded, 1: the user turn, 2: the reply too
            if added == 0:
                rows.append(shown({"role": "user", "content": current.text}))
            if added < 2:
                rows.append(shown({"role": "assistant", "content": current.reply or "…"}))
        waiting = list(state.pending)
        rows += [shown({"role": "user", "content": t}) for t in waiting]
        if (waiting or state.awaiting) and current is None:  # its reply is about to begin
            rows.append({"role": "assistant", "content": "…"})
        return rows

    @staticmethod
    def _note(state: UserState) -> str:
        waiting = len(state.pending)
        if not waiting or state.current is None:
            return ""
        return f"⏳ 답변을 기다리는 메시지 {waiting}개: 지금 답변이 끝나면 보낸 순서대로 답합니다."

    def end_session(self, state: UserState | None, draft: str = "") -> tuple[Any, ...]:
        """Queue the memory update and answer at once; the timer then polls its progress.

        Messages still waiting for a reply are not sent into the ended conversation: they go back into the
        textbox, before the draft, for the next conversation.
        """
        if state is None or state.session.ended:
            return state, "이미 끝난 대화입니다.", gr.Timer(active=False), gr.update(), gr.update()
        try:
            job_id = self.worker.end(state.session, "user")
        except KeemError as exc:  # nothing ended: the conversation goes on, and the page says why
            return (
                state,
                f"대화를 끝내지 못했습니다. {korean_error(exc)}",
                gr.Timer(active=False),
                gr.update(),
                gr.update(),
            )
        unsent = state.take_pending()
        box = gr.update(interactive=False)  # the box's text stays as it is, unless waiting messages come back
        if unsent:
            box = gr.update(interactive=False, value="\n".join(unsent + ([draft] if (draft or "").strip() else [])))
        state.job_id = job_id
        if state.job_id is None:
            return (state, "나눈 말이 없어 기억은 그대로입니다.", gr.Timer(active=False), box, gr.update(visible=True))
        return (
            state,
            "기억 갱신: 대기 중 … (백그라운드에서 진행됩니다. 계속 둘러보셔도 됩니다)",
            gr.Timer(active=True),
            box,
            gr.update(visible=True),
        )

    def poll(self, state: UserState | None) -> tuple[Any, ...]:
        """Progress of this tab's update job; refreshes the memory panel when it finishes."""
        if state is None or state.job_id is None:
            return gr.update(), gr.Timer(active=False), *self.keep_panel()
        try:
            job = self.bot.store.job(state.job_id)
        except InputError:
            state.job_id = None
            return "", gr.Timer(active=False), *self.keep_panel()
        if job["user_id"] != state.user_id:  # cannot happen: job ids come from this state only
            state.job_id = None
            return "", gr.Timer(active=False), *self.keep_panel()
        text, finished = stage_text(job)
        if not finished:
            return text, gr.Timer(active=True), *self.keep_panel()
        state.job_id = None
        return (text, gr.Timer(active=False), *self.memory_outputs(state))

    def new_session(self, state: UserState | None) -> tuple[Any, ...]:
        if state is None:
            return state, [], gr.update(), gr.update(), "", gr.update()
        if not state.session.ended:
            self.worker.end(state.session, "user")
        self._fresh_session(state)
        progress = gr.update() if state.job_id is not None else ""  # a running update keeps showing
        return state, [], gr.update(interactive=True), gr.update(visible=False), render_hits([]), progress

    # memory editing
    def _pick(self, state: UserState | None, pick: str | None) -> tuple[Version, int]:
        if state is None:
            raise InputError("먼저 대화를 시작하세요.")
        latest = self.bot.engine.current(state.user_id)
        if latest is None or not pick or ":" not in pick:
            raise InputError("고칠 문장을 먼저 고르세요.")
        number, _, index = pick.partition(":")
        if not (number.isdigit() and index.isdigit()):
            raise InputError("고칠 문장을 목록에서 고르세요.")
        if int(number) != latest.number or not 0 <= int(index) < len(latest.sentences):
            raise InputError("그 사이 기억이 바뀌었습니다. 목록에서 다시 고르세요.")
        return latest, int(index)

    def _commit(self, state: UserState, sentences: list[Sentence], note: str) -> tuple[str, str, Any, Any]:
        self.bot.engine.commit(state.user_id, sentences, strategy="user", status="ok", author="user", note=note)
        gr.Info("새 기억 버전을 저장했습니다.")
        return self.memory_outputs(state)

    def edit_sentence(self, pick: str | None, new_text: str, state: UserState | None) -> tuple[Any, ...]:
        latest, index = self._pick(state, pick)
        text = clean_message(new_text, 300).replace("\n", " ")
        sentences = carry_over(latest.sentences)
        sentences[index] = Sentence(text, "user", latest.sentences[index].id)
        return (*self._commit(state, sentences, f"사용자가 {index + 1}번 문장을 고쳤습니다"), "")  # type: ignore[arg-type]

    def delete_sentence(self, pick: str | None, state: UserState | None) -> tuple[Any, ...]:
        latest, index = self._pick(state, pick)
        if len(latest.sentences) == 1:
            raise InputError(
                "마지막 남은 문장은 지울 수 없습니다 (기억은 비워 둘 수 없습니다). 모두 지우려면 '나를 잊기'를 쓰세요."
            )
        sentences = carry_over(s for i, s in enumerate(latest.sentences) if i != index)
        return (*self._commit(state, sentences, f"사용자가 {index + 1}번 문장을 지웠습니다"), "")  # type: ignore[arg-type]

    def add_sentence(self, new_text: str, state: UserState | None) -> tuple[Any, ...]:
        if state is None:
            raise InputError("먼저 대화를 시작하세요.")
        text = clean_message(new_text, 300).replace("\n", " ")
        latest = self.bot.engine.current(state.user_id)
        old = carry_over(latest.sentences) if latest else []
        return (*self._commit(state, [*old, Sentence(text, "user")], "사용자가 문장을 추가했습니다"), "")

    def forget(self, confirm: str, state: UserState | None) -> tuple[Any, ...]:
        """Delete everything about this user once they type their name; the tab returns to the start screen."""
        if state is None:
            raise InputError("먼저 대화를 시작하세요.")
        if (confirm or "").strip() != state.name:
            raise InputError("확인란에 이름을 정확히 입력해야 삭제됩니다.")
        state.take_pending()
        state.session.ended = True  # no update job for a user being forgotten
        self.worker.end(state.session, "forget")
        self.bot.engine.forget(state.user_id)
        gr.Info("모든 대화와 기억을 삭제했습니다.")
        return self.logout(None) + ("",)


def start_button(backend: Backend) -> dict[str, Any]:
    """The start button's label and whether it takes clicks: only once the models are ready."""
    if backend.error is not None:
        return {"value": "모델을 불러오지 못했습니다", "interactive": False}
    if not backend.done.is_set() or backend.bot is None:
        return {"value": "모델을 불러오는 중 …", "interactive": False}
    return {"value": "대화 시작", "interactive": True}


def guarded(n_outputs: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn errors into a Korean toast and leave every output as it was: the user never sees a stack trace."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if not isinstance(exc, KeemError):
                    log.exception("%s failed", fn.__name__)
                gr.Warning(korean_error(exc))
                skipped = tuple(gr.skip() for _ in range(n_outputs))
                return skipped if n_outputs > 1 else skipped[0]

        return inner

    return wrap


CSS = """
.keem-banner {font-size: 0.9em; opacity: 0.9}
"""
UPLOAD_PATH = "/gradio_api/upload"
MAX_FILE_SIZE = "1kb"  # the page has no upload control; this also caps Gradio's other multipart routes


def refuse_uploads(request: fastapi.Request) -> None:
    """A FastAPI dependency on every route: Gradio's upload route answers 403 (the app takes no files)."""
    if request.url.path.rstrip("/").endswith(UPLOAD_PATH):
        raise fastapi.HTTPException(status_code=403, detail="uploads are off: this app takes no files")


def launch_options() -> dict[str, Any]:
    """What every launch of the app passes to `Blocks.launch` besides host and port: no file uploads.

    A fresh dict each call (Gradio adds its own entries to `app_kwargs`).
    """
    return {"max_file_size": MAX_FILE_SIZE, "app_kwargs": {"dependencies": [fastapi.Depends(refuse_uploads)]}}


def build_app(
    bot: Chatbot | Backend,
    worker: Worker | None = None,
    *,
    title: str = "KEEM 채팅",
    browser_identity: bool = False,
    study: Study | None = None,
    admin_password: str | None = None,
) -> gr.Blocks:
    """The Blocks app; every event is private to the page (api_visibility='private') and reads identity from state.

    `bot` may be a loading `Backend`: the page serves at once and says the models are loading. With
    `browser_identity` a random key kept in the browser's localStorage is part of who the user is. With a `study`
    (a user trial) the page asks for consent first, spaces the sessions and asks the questionnaire after each; with
    `admin_password` too, it has the organiser's view (chatbot/trials/web.py).
    """
    ui = ChatUI(bot, worker, browser_identity=browser_identity, study=study)
    trial = StudyUI(ui, study, admin_password) if study is not None else None
    hidden: dict[str, Any] = {"api_visibility": "private"}
    with gr.Blocks(title=title, analytics_enabled=False) as app:
        app.keem_ui = ui  # type: ignore[attr-defined]
        app.keem_study = trial  # type: ignore[attr-defined]
        state = gr.State(None, delete_callback=ui.on_state_deleted)
        gr.Markdown(f"# {title}\n한 사람을 오래 기억하는 한국어 대화 상대. 대화가 끝나면 기억을 통째로 다시 씁니다.")
        banner = gr.Markdown(ui.backend.banner(), elem_classes=["keem-banner"], elem_id="model-banner")
        banner_timer = gr.Timer(2.0, active=not ui.backend.done.is_set())
        with gr.Column(visible=True, elem_id="login") as login_box:
            name = gr.Textbox(
                label="이름 또는 참가자 코드", placeholder="예: 지우, P017", max_lines=1, elem_id="name-input"
            )
            start = gr.Button(**start_button(ui.backend), variant="primary", elem_id="start-button")
            hf_note = hf_login.login_controls() if hf_login.enabled() else None
            gate_note = gr.Markdown(elem_id="study-note") if trial is not None else None
        if trial is not None:  # a user trial: the consent text, and the questionnaire after each session
            consent_box = trial.consent_box()
            survey_box, survey_title, survey_fields = trial.survey_box()
        gr.on(
            [app.load, banner_timer.tick],
            ui.banner,
            None,
            [banner, banner_timer, start],
            show_progress="hidden",
            concurrency_limit=None,
            **hidden,
        )
        if hf_note is not None:  # a visitor signed in with Hugging Face sees that name, locked, in the name box
            app.load(hf_login.on_load, None, [name, hf_note], show_progress="hidden", **hidden)
        with gr.Column(visible=False, elem_id="main") as main_box:
            with gr.Row():
                greeting = gr.Markdown(elem_id="greeting")
                logout = gr.Button("나가기", size="sm", scale=0, elem_id="logout-button")
            with gr.Tabs():
                with gr.Tab("대화", id="chat-tab"):
                    chat = gr.Chatbot(
                        label="대화",
                        height=420,
                        elem_id="chat",
                        sanitize_html=True,
                        buttons=["copy", "copy_all"],
                        placeholder="메시지를 입력해 대화를 시작하세요.",
                    )
                    with gr.Row():
                        message = gr.Textbox(
                            show_label=False,
                            placeholder="메시지를 입력하고 Enter",
                            scale=5,
                            max_lines=6,
                            elem_id="message-input",
                        )
                        send = gr.Button("보내기", variant="primary", scale=1, elem_id="send-button")
                    note = gr.Markdown(elem_id="pending-note")
                    with gr.Accordion("이번 답변에 쓰인 기억", open=False, elem_id="hits-accordion"):
                        hits = gr.Markdown(elem_id="hits")
                    with gr.Row():
                        end = gr.Button("대화 끝내기 (기억 갱신)", variant="stop", elem_id="end-button")
                        again = gr.Button("새 대화 시작", visible=False, elem_id="new-session-button")
                    progress = gr.Markdown(elem_id="progress")
                with gr.Tab("기억", id="memory-tab"):
                    memory = gr.Markdown(elem_id="memory")
                    retry = gr.Button("실패한 갱신 다시 시도", visible=False, size="sm", elem_id="retry-button")
                    with gr.Accordion("문장 고치기 · 지우기 · 추가", open=False):
                        pick = gr.Dropdown(label="문장 고르기", choices=[], elem_id="pick")
                        edit_text = gr.Textbox(label="새 문장", max_lines=3, elem_id="edit-text")
                        with gr.Row():
                            edit_btn = gr.Button("고른 문장을 새 문장으로 고치기", elem_id="edit-button")
                            add_btn = gr.Button("새 문장 추가", elem_id="add-button")
                            delete_btn = gr.Button("고른 문장 지우기", elem_id="delete-button")
                    gr.Markdown("### 버전 기록")
                    history = gr.Markdown(elem_id="history")
                    with gr.Accordion("나를 잊기 (모든 데이터 삭제)", open=False):
                        gr.Markdown(
                            "대화, 세션, 모든 기억 버전을 지웁니다. 되돌릴 수 없습니다. 확인을 위해 이름을 입력하세요."
                        )
                        confirm = gr.Textbox(label="이름 확인", max_lines=1, elem_id="forget-confirm")
                        forget_btn = gr.Button("모두 삭제", variant="stop", elem_id="forget-button")
        timer = gr.Timer(1.0, active=False)

        panel = [memory, history, pick, retry]
        after_login = [state, login_box, main_box, greeting, chat, hits, message, progress, again, *panel]
        cleared = [state, login_box, main_box, greeting, chat, hits, progress, *panel]
        # the key is only obfuscated in localStorage (Gradio sends the page its secret): the key is the credential
        key = [gr.BrowserState("", storage_key="keem-identity", secret="keem-identity")] if browser_identity else []
        ui.login_outputs = len(after_login) + len(key)
        # no concurrency limit: a login is a few quick writes, and 20 at once must not wait in waves of 4
        if trial is None:
            opened = [
                gr.on(
                    [start.click, name.submit],
                    guarded(ui.login_outputs)(ui.login),
                    [name, *key],
                    [*after_login, *key],
                    concurrency_limit=None,
                    **hidden,
                )
            ]
        else:  # consent, then the gap between sessions, decide; the chat opens only for an admitted participant
            person = gr.State(None)
            survey = [survey_box, survey_title, *survey_fields]
            gated = [person, consent_box, gate_note, *survey]
            opened = []
            for trigger, handler, inputs in (
                ([start.click, name.submit], trial.enter, [name, *key]),
                ([trial.agree_button.click], trial.agree, [person]),
            ):
                opened.append(
                    gr.on(trigger, guarded(len(gated))(handler), inputs, gated, concurrency_limit=None, **hidden).then(
                        guarded(ui.login_outputs)(trial.open_chat), [person, *key], [*after_login, *key], **hidden
                    )
                )
            trial.decline_button.click(guarded(len(gated))(trial.decline), [person], gated, **hidden)
            trial.submit_button.click(
                guarded(1 + len(survey))(trial.submit), [person, *survey_fields], [person, *survey], **hidden
            )
        signed_out = logout.click(guarded(len(cleared))(ui.logout), [state], cleared, **hidden)
        # sending only queues the message (never waiting behind other users' replies); `respond` then answers
        # everything queued. "multiple": a message sent while a reply streams must reach the server (Gradio's
        # default "once" would drop it); a respond started while another answers returns at once.
        gr.on(
            [send.click, message.submit],
            guarded(3)(ui.send),
            [message, state],
            [message, chat, note],
            concurrency_limit=None,
            show_progress="hidden",
            **hidden,
        ).then(
            ui.respond,
            [state],
            [chat, hits, note],
            concurrency_limit=4,
            trigger_mode="multiple",
            show_progress="minimal",
            **hidden,
        )
        # no queue: the answer must not wait behind streaming replies (target: under 0.5 s)
        ended = end.click(
            guarded(5)(ui.end_session),
            [state, message],
            [state, progress, timer, message, again],
            queue=False,
            show_progress="hidden",
            **hidden,
        )
        timer.tick(
            guarded(2 + len(panel))(ui.poll),
            [state],
            [progress, timer, *panel],
            concurrency_limit=None,
            show_progress="hidden",
            **hidden,
        )
        renewed = again.click(
            guarded(6)(ui.new_session), [state], [state, chat, message, again, hits, progress], **hidden
        )
        retried = retry.click(
            guarded(2 + len(panel))(ui.retry_failed),
            [state],
            [progress, timer, *panel],
            show_progress="hidden",
            **hidden,
        )
        edit_btn.click(
            guarded(len(panel) + 1)(ui.edit_sentence), [pick, edit_text, state], [*panel, edit_text], **hidden
        )
        add_btn.click(guarded(len(panel) + 1)(ui.add_sentence), [edit_text, state], [*panel, edit_text], **hidden)
        delete_btn.click(guarded(len(panel) + 1)(ui.delete_sentence), [pick, state], [*panel, edit_text], **hidden)
        forget_btn.click(guarded(len(cleared) + 1)(ui.forget), [confirm, state], [*cleared, confirm], **hidden)
        if trial is not None:
            ended.then(guarded(1 + len(survey))(trial.after_end), [state, person], [person, *survey], **hidden)
            signed_out.then(trial.leave, None, gated, **hidden)
            if trial.password is not None:  # no password, no organiser view at all
                granted, password, unlock, view, overview, refresh, export, archive = trial.organiser_box()
                unlock.click(
                    guarded(4)(trial.unlock), [password, granted], [granted, view, overview, password], **hidden
                )
                refresh.click(guarded(1)(trial.refresh), [granted], [overview], **hidden)
                export.click(guarded(1)(trial.download), [granted], [archive], **hidden)
        if ui.zero is not None:  # ZeroGPU: a user's memory updates run in their own events (chatbot/deploy/zerogpu.py)
            ui.zero.wire([*opened, ended, renewed, retried], state, progress, timer, **hidden)
    return app
