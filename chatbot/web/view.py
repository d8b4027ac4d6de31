"""What one event changes on the page, by name: typed views that become Gradio's `{component: value}` outputs.

A handler returns a view (a dataclass whose fields are the page's parts); a field left `KEEP` is not touched.
`wired` turns the view into the dict Gradio takes, for the outputs the event lists by the same names, so adding an
output never shifts another; a view that sets a part its event does not output is an error, not a silent drop.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self

import gradio as gr

from chatbot.web import toasts
from chatbot.web.messages import korean_error
from models.errors import KeemError, UserForgottenError

log = logging.getLogger(__name__)


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()  # a view's field left as it is on the page


class View:
    """Base of the views: `changed()` gives the fields set; `a | b` is `a` with `b`'s set fields on top."""

    def changed(self) -> dict[str, Any]:
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not KEEP}  # type: ignore[arg-type]

    def __or__(self, other: View) -> Self:
        return type(self)(**{**self.changed(), **other.changed()})


@dataclass
class PageView(View):
    """The chat page's parts (chatbot/web/app.py builds one component per field)."""

    state: Any = KEEP  # the tab's UserState (server-side)
    key: Any = KEEP  # the browser's identity key (localStorage), with browser identity only
    model_info: Any = KEEP  # the ⓘ (an accordion) that holds the banner
    banner: Any = KEEP
    banner_timer: Any = KEEP
    demo_box: Any = KEEP  # the chat tab's note while the demo model answers (open until closed)
    start: Any = KEEP  # the start button
    name: Any = KEEP  # the name box
    hf_note: Any = KEEP  # the Hugging Face sign-in hint
    who: Any = KEEP  # the login box's line naming who a login (auth) signed in as
    signout: Any = KEEP  # the login box's sign-out button (shown with a login)
    signed_as: Any = KEEP  # the login's name in a hidden box, for the page's sign-out script ("" without one)
    login_box: Any = KEEP
    main_box: Any = KEEP
    greeting: Any = KEEP
    chat: Any = KEEP
    message: Any = KEEP
    note: Any = KEEP  # messages waiting for their reply
    hits: Any = KEEP  # the memory used by the last reply
    progress: Any = KEEP  # the memory update's progress line
    again: Any = KEEP  # the new-conversation button
    jobs: Any = KEEP  # the memory tab's updates not yet in memory (waiting, running, failed)
    memory: Any = KEEP  # the one list of the current memory (chatbot/web/memory_list.py MemoryList; None: nobody)
    add_text: Any = KEEP  # the "문장 추가" box under the list
    history: Any = KEEP  # "버전 기록": earlier versions, each with its changelog
    retry: Any = KEEP  # the retry-failed-updates button
    emotions: Any = KEEP  # the emotion timeline (chatbot/web/emotions.py)
    confirm: Any = KEEP  # the forget box's name check
    # "바뀐 것과 그 이유": the latest version's changelog with its undo buttons (chatbot/web/why.py)
    changelog: Any = KEEP
    restore: Any = KEEP  # a list: one "되살리기" button per dropped sentence slot
    revert: Any = KEEP  # "이번 갱신 되돌리기"
    tabs: Any = KEEP  # the page's tabs (which one is open)
    end: Any = KEEP  # the end button
    send: Any = KEEP  # the send button
    card: Any = KEEP  # the status card after 대화 끝내기 (chatbot/web/ending.py)
    steps: Any = KEEP  # the card's text: the memory update's stages
    past_pick: Any = KEEP  # the 지난 대화 tab's list (chatbot/web/past.py)
    transcript: Any = KEEP  # the conversation picked there
    stop: Any = KEEP  # ■ 멈추기, shown only while a reply streams (chatbot/web/actions.py)
    regenerate: Any = KEEP  # ↻ 다시 생성, shown only when the last turn is a finished reply (actions.py)


def empty_panel() -> PageView:
    """The memory tab of nobody (logged out)."""
    return PageView(
        jobs="",
        memory=None,
        history="",
        retry=gr.update(visible=False),
        changelog="",
        restore=[gr.update(visible=False)] * RESTORE_SLOTS,
        revert=gr.update(visible=False),
        emotions="",
    )


def signed_out() -> PageView:
    """The start screen again: no user, the chat and memory tab emptied."""
    return (
        PageView(
            state=None,
            login_box=gr.update(visible=True),
            main_box=gr.update(visible=False),
            greeting="",
            chat=[],
            hits="",
            progress="",
            card=gr.update(visible=False),
            steps="",
            end=gr.update(interactive=True),
            send=gr.update(interactive=True),
            past_pick=gr.update(choices=[], value=None),
            transcript="",
            stop=gr.update(visible=False),
            regenerate=gr.update(visible=False),
            add_text="",  # a sentence typed for one user is not left for the next (a shared lab PC)
        )
        | empty_panel()
    )


def forgotten(exc: UserForgottenError) -> PageView:
    """The tab's user was deleted meanwhile (another tab's "나를 잊기", `keem memory forget`): a Korean notice, and the
    start screen with nothing of anyone on it (an event following the update stops). The message box is not touched
    (a reply's frames never write it, so that a draft survives: see chat.py), it is hidden with the chat."""
    toasts.warning(korean_error(exc))
    return signed_out() | PageView(note="")


Outputs = Mapping[str, Any]  # a view's field name -> its component (a list of components for a list-valued field)


def as_outputs(view: View | None, outputs: Outputs, name: str = "handler") -> Any:
    """`view` as `{component: value}` for an event whose outputs are `outputs`; nothing changed: gr.skip()."""
    changed = view.changed() if view is not None else {}
    unwired = sorted(set(changed) - set(outputs))
    if unwired:
        raise ValueError(f"{name} sets {unwired}, which its event does not output: add them to its outputs")
    result: dict[Any, Any] = {}
    for field, value in changed.items():
        target = outputs[field]
        if isinstance(target, list):  # one value per component (a questionnaire's answers)
            result.update(zip(target, value, strict=True))
        else:
            result[target] = value
    return result or gr.skip()


def warn(fn: Callable[..., Any], exc: Exception) -> None:
    """An error as a Korean toast: the user never sees a stack trace (unexpected ones go to the log)."""
    if not isinstance(exc, KeemError):
        log.exception("%s failed", getattr(fn, "__name__", fn), exc_info=exc)
    toasts.warning(korean_error(exc))


def wired(fn: Callable[..., Any], outputs: Outputs) -> Callable[..., Any]:
    """The Gradio handler for `fn` (which returns or yields views): its views as `{component: value}`, and an
    error a Korean toast with the page left as it was. Name and signature stay `fn`'s (Gradio reads them).

    A UserForgottenError (the tab's user was deleted while the event ran, a reply's stream included) shows the
    `forgotten` view instead, when the event outputs its parts (Page.on adds them to every event that takes the
    tab's state)."""

    def failed(exc: Exception) -> Any:
        if isinstance(exc, UserForgottenError) and set(FORGOTTEN) <= set(outputs):
            return as_outputs(forgotten(exc), outputs, fn.__name__)
        warn(fn, exc)
        return gr.skip()

    if inspect.isasyncgenfunction(fn):  # an event held open that yields when something changes (Flow.watch)

        @functools.wraps(fn)
        async def follow(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            try:
                async for view in fn(*args, **kwargs):
                    yield as_outputs(view, outputs, fn.__name__)
            except Exception as exc:
                yield failed(exc)

        return follow

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                for view in fn(*args, **kwargs):
                    yield as_outputs(view, outputs, fn.__name__)
            except Exception as exc:
                yield failed(exc)

        return stream

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            view = fn(*args, **kwargs)
        except Exception as exc:
            return failed(exc)
        return as_outputs(view, outputs, fn.__name__)

    return call


class Page:
    """The page's components by view field name, and its events wired by those names (every one private to the
    page: `options` go to each event)."""

    def __init__(self, *, reply_slots: int = 4, **options: Any):
        self.parts: dict[str, Any] = {}
        self.events: dict[str, Any] = {}  # events other parts chain onto ("ended", "signed_out")
        self.options = options
        # every event that streams a model's answer (a reply, a retry, the opening question) shares these slots
        self.streams: dict[str, Any] = {"concurrency_limit": reply_slots, "concurrency_id": "replies"}

    def add(self, **parts: Any) -> None:
        self.parts.update(parts)

    def __getitem__(self, name: str) -> Any:
        return self.parts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.parts

    def logged_in(self) -> list[str]:
        """What a login shows: the chat page, its memory tab and, with browser identity, the browser's key."""
        return [*LOGGED_IN, *(["key"] if "key" in self else [])]

    def on(
        self,
        triggers: Any,
        fn: Callable[..., Any],
        inputs: Sequence[Any] | None,
        outputs: Sequence[str],
        *,
        after: Any = None,
        **options: Any,
    ) -> Any:
        """Wire `fn` (it returns or yields views) to `triggers`, or chained `after` an event; `outputs` are names.

        An event that takes the tab's state also outputs the start screen's parts (FORGOTTEN), so that when the
        tab's user turns out to be deleted it can show the notice and return there (chatbot/web/backend.py
        AppContext.gone). A frame or answer that leaves them as they are costs nothing (chatbot/web/blocks.py)."""
        kwargs = {**self.options, **options}
        if "state" in self.parts and any(i is self.parts["state"] for i in inputs or ()):
            # the progress animation stays on the parts the event is about, not on the start screen's
            own = [
                c
                for name in outputs
                if name not in QUIET
                for c in _flat(self.parts[name])
                if not isinstance(c, gr.State)
            ]
            if own:
                kwargs.setdefault("show_progress_on", own)
            outputs = [*outputs, *(name for name in FORGOTTEN if name not in outputs)]
        targets = {name: self.parts[name] for name in outputs}
        flat = [c for t in targets.values() for c in _flat(t)]
        handler = wired(fn, targets)
        if after is not None:
            return after.then(handler, inputs, flat, **kwargs)
        return gr.on(triggers, handler, inputs, flat, **kwargs)

    def stream(self, fn: Callable[..., Any], outputs: Sequence[str], *, after: Any, **options: Any) -> Any:
        """Wire `fn`, which streams a model's answer from the tab's state, after an event, in the replies' shared
        slots (`streams`). Like every event that takes the tab's state it also outputs the start screen's parts:
        when the tab's user is gone, the stream itself shows the notice and the start screen (AppContext.gone),
        and its other frames leave them as they are at no cost (chatbot/web/blocks.py), so no check is chained
        after it (one queued event a turn fewer)."""
        return self.on(None, fn, [self.parts["state"]], outputs, after=after, **self.streams, **options)


def _flat(target: Any) -> list[Any]:
    """A part's components: itself, or the list a list-valued part holds (a questionnaire's answers)."""
    return list(target) if isinstance(target, list) else [target]


RESTORE_SLOTS = 4  # "되살리기" buttons for dropped sentences, the latest update's first (chatbot/web/why.py restorable)
PANEL = ("jobs", "memory", "history", "retry", "changelog", "restore", "revert", "emotions")
# what leaving clears besides the chat and the panel
AWAY = ("card", "steps", "end", "send", "past_pick", "transcript", "add_text", "stop", "regenerate")
LOGGED_IN = (
    *("state", "login_box", "main_box", "greeting", "chat", "hits", "message", "progress", "again", *PANEL),
    *("stop", "regenerate"),  # the reply actions (chatbot/web/actions.py): hidden on an empty chat
)
SIGNED_OUT = ("state", "login_box", "main_box", "greeting", "chat", "hits", "progress", *PANEL, *AWAY)
FORGOTTEN = (*SIGNED_OUT, "note")  # what `forgotten` sets
QUIET = ("stop", "regenerate")  # shown or hidden by an event, never spun on: a reply spins on the chat only
