"""Which reply actions a tab shows (the `reply-actions` row, chatbot/web/app.py): ■ 멈추기 only while a reply or the
opening question streams (or one is about to: a message waits for its reply), ↻ 다시 생성 only when the last turn is
a finished reply of this session that can be asked again (not on an empty chat, not after 대화 끝내기, not while a
reply streams, not after a failure: its notice offers 다시 보내기). Every event that changes either sets both
through `actions`, from the tab's own UserState, so another tab of the same user keeps its own."""

from __future__ import annotations

import gradio as gr

from chatbot.web.state import UserState
from chatbot.web.view import PageView

REPLY_ACTIONS = ("stop", "regenerate")  # the view fields `actions` sets


def can_stop(state: UserState | None) -> bool:
    return state is not None and state.busy


def can_regenerate(state: UserState | None) -> bool:
    """The last turn is a finished reply of the tab's session (stopped counts: it is what the user kept), nothing
    streams, the conversation goes on, and no failed message waits for 다시 보내기. The opening question is no
    reply to anything, so there is nothing to ask again."""
    if state is None or state.busy:
        return False
    session = state.session
    if session.ended or not session.history or session.history[-1]["role"] != "assistant":
        return False
    if session.last_reply is None:  # the opening, or a reply taken out
        return False
    return not any(f.open and f.session is session for f in state.failures)


def actions(state: UserState | None) -> PageView:
    """The row's buttons as the tab's state says."""
    return PageView(stop=gr.update(visible=can_stop(state)), regenerate=gr.update(visible=can_regenerate(state)))


def hidden() -> PageView:
    """Neither button: nobody is here, or nothing was said yet."""
    return PageView(stop=gr.update(visible=False), regenerate=gr.update(visible=False))
