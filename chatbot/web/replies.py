"""What a user can do about a reply: send again the messages whose reply failed (다시 보내기), ask for another
reply (다시 생성), and stop a streaming one (멈추기). The stored turns stay honest: a retried message is not stored
twice, a replaced reply stays stored marked 'replaced', a stopped one keeps what was shown, marked 'stopped'
(chatbot/session.py ChatSession.reply, redo and retract). Which of the buttons shows is actions.py's to say."""

from __future__ import annotations

import gradio as gr

from chatbot.web import toasts
from chatbot.web.actions import actions, can_regenerate
from chatbot.web.backend import AppContext, for_user
from chatbot.web.chat import rows
from chatbot.web.notices import RETRY, STOPPED
from chatbot.web.state import Failure, UserState
from chatbot.web.view import PageView
from models.errors import InputError


class Replies:
    """The events of 다시 보내기, 다시 생성 and 멈추기; each takes the tab's server-side UserState."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    @for_user()
    def again(self, state: UserState) -> PageView:
        """After a failure, answer again every message that got no reply since the last answer (its notice goes,
        each reply comes right after its message); else ask for another reply in place of the last. The chained
        `respond` streams them; nothing new is stored for the messages."""
        with state.lock:
            session = state.session
            if state.busy:
                raise InputError("a reply is streaming; try again when it has ended", code="reply_busy")
            if session.ended:
                raise InputError("this conversation has ended; start a new one", code="session_over")
            failed = [f for f in state.failures if f.open and f.session is session]
            if failed:
                resend(state, failed)
            # the rule that shows ↻ 다시 생성 (busy, ended and failures are ruled out above)
            elif can_regenerate(state):
                session.redo()
                state.await_reply()  # the chained respond answers it
            else:
                raise InputError("no message to answer again; send one first", code="nothing_to_redo")
        self.ctx.worker.touch(session)
        return PageView(chat=rows(state), note="") | actions(state)

    def option(self, state: UserState | None, evt: gr.SelectData) -> PageView:
        """A chat message's option was picked: the failure notice's 다시 보내기."""
        if evt.value != RETRY:
            return PageView()
        return self.again(state)

    @for_user(PageView)
    def stop(self, state: UserState) -> PageView:
        """Stop the reply (or opening question) streaming now, or the one about to: it ends after its next piece,
        and what was shown stays, stored as a stopped reply. Messages sent meanwhile are still answered."""
        if not state.stop():
            raise InputError("no reply is streaming", code="nothing_to_stop")
        return PageView(note=STOPPED, stop=gr.update(visible=False))

    @for_user(lambda: PageView(chat=[]))
    def redraw(self, state: UserState) -> PageView:
        """The chat's own clear icon was used (the page hides it): the conversation is stored and goes on, so the
        chat shows it again rather than pretend it is gone."""
        toasts.info("대화는 지워지지 않습니다. 새로 시작하려면 '대화 끝내기' 뒤 '새 대화 시작'을 누르세요.")
        return PageView(chat=rows(state))


def resend(state: UserState, failed: list[Failure]) -> None:
    """Queue the failed messages for `respond`, oldest first; what streamed of their replies before the failure
    leaves the conversation (stored, marked 'replaced'), later ones first so earlier places stay put."""
    session = state.session
    for f in sorted(failed, key=lambda f: f.nth, reverse=True):
        at = session.user_index(f.nth)
        if f.cut is not None and at is not None:
            session.retract(at + 1, f.cut)
    state.answer_again(failed)
