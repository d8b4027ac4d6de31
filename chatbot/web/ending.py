"""After 대화 끝내기: a status card beside the message box with the memory update's stages and 새 대화 시작 as the main
action; the message box says why it is off, and the end button takes no second click. 새 대화 시작 puts it all
back. The handlers wrap the conversation's own (chatbot/web/chat.py Conversation.end_session / new_session)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from chatbot.web.backend import AppContext
from chatbot.web.chat import PLACEHOLDER, Conversation
from chatbot.web.messages import korean_stored_error
from chatbot.web.render import STAGES
from chatbot.web.state import UserState
from chatbot.web.view import KEEP, PageView

ENDED = "대화가 끝났습니다."  # short, so a phone's box shows it whole; the card beside says what comes next
ORDER = ("queued", "summarizing", "reflecting", "updating", "verifying", "cues", "recompute")
LATER = "끝낸 대화는 **지난 대화** 탭에서 다시 볼 수 있어요."


def steps(seen: list[str], job: dict[str, Any] | None) -> str:
    """The card's text: the stages this update has been seen in (✓ passed, ⏳ now), or how it ended."""
    if job is None:
        return f"**대화를 끝냈어요.** 나눈 말이 없어 기억은 그대로예요.\n\n{LATER}"
    stage = job["stage"] or "queued"
    if job["status"] == "done":
        result = STAGES.get(stage, stage)
        return f"**대화를 끝냈어요.** ✓ 이 대화로 기억을 새로 썼어요: {result}.\n\n{LATER}"
    if job["status"] == "failed" or stage == "failed":
        later = "잠시 뒤 다시 시도해요." if job["status"] == "pending" else "기억 탭에서 다시 시도할 수 있어요."
        reason = korean_stored_error(job.get("last_error"))
        failed = f"⚠️ 기억을 새로 쓰지 못했어요 ({reason}). {later} 이전 기억은 그대로예요."
        return f"**대화를 끝냈어요.** {failed}\n\n{LATER}"
    done = [s for s in seen if s != stage]
    lines = [f"- ✓ {STAGES.get(s, s)}" for s in done] + [f"- ⏳ {STAGES.get(stage, stage)} …"]
    return (
        "**대화를 끝냈어요.** 이 대화로 기억을 새로 쓰는 중이에요 (기다리지 않고 새 대화를 시작해도 돼요).\n\n"
        + "\n".join(lines)
        + f"\n\n{LATER}"
    )


class Ending:
    """The end of a conversation and the start of the next, as the page shows them."""

    def __init__(self, ctx: AppContext, chat: Conversation):
        self.ctx, self.chat = ctx, chat

    def job(self, state: UserState) -> dict[str, Any] | None:
        """The update job of the tab's (ended) session, if it has one."""
        session_id = state.session.session_id
        return next((j for j in self.ctx.bot.store.queue.jobs(state.user_id) if j["session_id"] == session_id), None)

    def end_session(self, state: UserState | None, draft: str = "") -> PageView:
        """대화 끝내기: the conversation's end (queued update, answered at once), then the card."""
        view = self.chat.end_session(state, draft)
        if state is None or view.again is KEEP or not state.session.ended:  # not ended (or the user is gone)
            return view
        state.saw(None)  # a new card
        return view | PageView(
            card=gr.update(visible=True),
            steps=steps([], self.job(state)),
            end=gr.update(interactive=False),
            send=gr.update(interactive=False),
            message=gr.update(interactive=False, placeholder=ENDED),
        )

    def tick(self, state: UserState | None, job: dict[str, Any] | None = None) -> PageView:
        """The card follows the update's stages (Flow.watch; `job` as just read there). The guard is not asked: the
        memory tab's poll, in the same event, asked it first and tells a forgotten user (chatbot/web/flow.py
        Flow.poll)."""
        if state is None or not state.session.ended:
            return PageView()
        if job is None or job["session_id"] != state.session.session_id:  # not the one just read: look it up
            job = self.job(state)
        if job is not None and job["status"] in ("pending", "running") and (job["stage"] or "queued") != "failed":
            state.saw(job["stage"] or "queued")
        return PageView(steps=steps(state.seen, job))

    def new_session(self, state: UserState | None) -> PageView:
        """새 대화 시작: the next conversation, and the page as it was before the end."""
        view = self.chat.new_session(state)
        if state is None or view.again is KEEP:
            return view
        return view | PageView(
            card=gr.update(visible=False),
            steps="",
            end=gr.update(interactive=True),
            send=gr.update(interactive=True),
            message=gr.update(interactive=True, placeholder=PLACEHOLDER),
        )
