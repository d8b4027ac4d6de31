"""The "지난 대화" tab: the user's ended conversations, each read-only as it was stored (this user's sessions and
turns only: every event re-checks who the tab is for, and a conversation is shown only to its own user)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from chatbot.localtime import LocalTime
from chatbot.web.backend import AppContext, for_user
from chatbot.web.render import md
from chatbot.web.state import UserState
from chatbot.web.view import PageView
from models.errors import InputError

SPEAKERS = {"user": "나", "assistant": "KEEM"}
MARKED = {
    "stopped": " *(멈춘 답변: 보인 데까지)*",
    "failed": " *(모델 오류로 끊긴 답변)*",
    "replaced": " *(다시 생성해 바꾼 답변: 기억에는 쓰이지 않음)*",
}
NONE = "아직 끝낸 대화가 없어요. 대화를 끝내면 여기서 다시 볼 수 있어요."
PICK = "위에서 대화를 고르면 나눈 말을 그대로 보여 드려요 (읽기 전용)."


def when(stamp: str | None, local: LocalTime) -> str:
    """A stored (UTC) time in KEEM_TIMEZONE, the zone named, like every time the page shows."""
    return local.stamp(stamp)


class Past:
    """The tab's events; each takes the tab's server-side UserState."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    @for_user(lambda: PageView(past_pick=gr.update(choices=[], value=None), transcript=""))
    def listing(self, state: UserState) -> PageView:
        """The list to pick from (the tab opens, a conversation ends)."""
        found = self.ctx.bot.store.sessions.past(state.user_id)
        local = self.ctx.bot.settings.local_time
        choices = [
            (f"{when(c['started_at'], local)} · 메시지 {c['turns']}개 · {(c['first'] or '')[:30]}", str(c["id"]))
            for c in found
        ]
        return PageView(past_pick=gr.update(choices=choices, value=None), transcript=PICK if found else NONE)

    @for_user()
    def show(self, pick: str | None, state: UserState) -> PageView:
        """One conversation's transcript, as stored (a stopped or replaced reply says so)."""
        if not pick or not str(pick).isdigit():
            return PageView(transcript=PICK)
        store = self.ctx.bot.store
        try:
            session = store.sessions.get(int(pick))
        except InputError:
            session = None
        if session is None or session["user_id"] != state.user_id:  # never another user's, whatever was sent
            raise InputError(
                "that conversation is not this user's or no longer exists; pick from the list again",
                code="past_not_found",
            )
        return PageView(
            transcript=transcript(
                session, store.turns.of_session(session["id"], replaced=True), self.ctx.bot.settings.local_time
            )
        )


def transcript(session: dict[str, Any], turns: list[dict[str, Any]], local: LocalTime) -> str:
    """A conversation as Markdown: when it was, then each message with its speaker (escaped; read-only)."""
    head = f"**{when(session['started_at'], local)}에 시작한 대화**"
    if session.get("ended_at"):
        head += f" · {when(session['ended_at'], local)}에 끝남"
    lines = [head, ""]
    for t in turns:
        mark = MARKED.get(t.get("mark") or "", "")
        lines.append(f"**{SPEAKERS.get(t['role'], t['role'])}** {md(t['text'])}{mark}")
    return "\n\n".join(lines)
