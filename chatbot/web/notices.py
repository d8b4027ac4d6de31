"""A reply the model could not give, inline in the chat where the reply would be: a Korean notice (its text from
messages.py's table) and the technical line folded away under "기술 정보" (and in the server log). Each failed
message keeps its notice beside it; 다시 보내기 (an option Gradio shows only under the chat's last message) sits
under the last one while nothing came after it, and answers again every message that got no reply since the last
answer, each reply in its place; the earlier of those notices say that it answers them too."""

from __future__ import annotations

import logging
from typing import Any

from chatbot.session import ChatSession
from chatbot.web.messages import korean_error
from chatbot.web.render import md
from chatbot.web.state import Failure, UserState
from models.errors import KeemError, describe

log = logging.getLogger(__name__)
RETRY = "retry"  # the value of the notice's 다시 보내기 option (the chat's option_select event)
HEAD = "⚠️ 답변을 받지 못했습니다."
ALSO = "아래 '다시 보내기'를 누르면 이 메시지에도 다시 답합니다."
STOPPED = "답변을 멈췄습니다. 보인 데까지 저장했습니다."


def failure(exc: BaseException, session: ChatSession, nth: int, turn: int | None, cut: int | None) -> Failure:
    """The notice of the reply to the session's `nth` user message (stored as `turn`) that failed, after `cut`
    streamed (None: nothing did); logged with its technical line (and the stack, for an error nobody named)."""
    detail = describe(exc)
    if isinstance(exc, KeemError):
        log.warning("chat reply failed (session %s): %s", session.session_id, detail)
    else:
        log.error("chat reply failed (session %s)", session.session_id, exc_info=exc)
    return Failure(session, nth, turn, cut, korean_error(exc), detail)


def retry_label(count: int) -> str:
    """The 다시 보내기 option's label: how many messages it answers again, when more than one."""
    return "다시 보내기" if count < 2 else f"다시 보내기 (메시지 {count}개)"


def notice_rows(failure: Failure, retry: str | None = None, also: bool = False) -> list[dict[str, Any]]:
    """The notice as chat messages: the Korean text, then the technical line folded; with `retry` (a label) the
    다시 보내기 option, which Gradio shows under the chat's last message; `also`: the option below answers this
    message too."""
    text = f"{HEAD} {md(failure.text)}" + (f" {ALSO}" if also else "")
    rows: list[dict[str, Any]] = [
        {"role": "assistant", "content": text},
        {"role": "assistant", "content": md(failure.detail), "metadata": {"title": "기술 정보", "status": "done"}},
    ]
    if retry is not None:
        rows[-1]["options"] = [{"value": RETRY, "label": retry}]
    return rows


def where(failure: Failure) -> int | None:
    """Where the failure's notice goes in its session's history: after its message and what streamed of its reply
    (None: the message is not in the history, e.g. its user was forgotten)."""
    history = failure.session.history
    at = failure.session.user_index(failure.nth)
    if at is None:
        return None
    cut = failure.cut is not None and at + 1 < len(history) and history[at + 1]["role"] == "assistant"
    return at + 1 + int(cut)


def notices(state: UserState, idle: bool) -> list[tuple[int, list[dict[str, Any]]]]:
    """The notices of the tab's session, each with its place in the history; the last open one offers 다시 보내기
    when nothing came after it and the chat is `idle` (nothing streams or waits), unless the conversation ended."""
    session = state.session
    mine = [(at, f) for f in state.failures if f.session is session and (at := where(f)) is not None]
    opened = [(at, f) for at, f in mine if f.open]
    last = max(opened, key=lambda p: p[0], default=None)
    offer = last is not None and last[0] == len(session.history) and idle and not session.ended
    placed = []
    for at, f in mine:
        if offer and last is not None and f is last[1]:
            placed.append((at, notice_rows(f, retry_label(len(opened)))))
        else:
            placed.append((at, notice_rows(f, also=offer and f.open)))
    return placed
