"""A reply the model could not give, inline in the chat where the reply would be: a Korean notice (its text from
messages.py's table), a 다시 보내기 option while it is the last thing in the chat, and the technical line folded
away under "기술 정보" (and in the server log)."""

from __future__ import annotations

import logging
from typing import Any

from chatbot.session import ChatSession
from chatbot.web.messages import korean_error
from chatbot.web.render import md
from chatbot.web.state import Failure
from models.errors import KeemError, describe

log = logging.getLogger(__name__)
RETRY = "retry"  # the value of the notice's 다시 보내기 option (the chat's option_select event)
HEAD = "⚠️ 답변을 받지 못했습니다."
STOPPED = "답변을 멈췄습니다. 보인 데까지 저장했습니다."


def failure(exc: BaseException, session: ChatSession) -> Failure:
    """The notice of a reply that failed after the session's present turns; logged with its technical line (and
    the stack, for an error nobody named)."""
    detail = describe(exc)
    if isinstance(exc, KeemError):
        log.warning("chat reply failed (session %s): %s", session.session_id, detail)
    else:
        log.error("chat reply failed (session %s)", session.session_id, exc_info=exc)
    return Failure(session, len(session.history), korean_error(exc), detail)


def notice_rows(failure: Failure, retry: bool) -> list[dict[str, Any]]:
    """The notice as chat messages: the Korean text, then the technical line folded; with `retry` (nothing came
    after it) the 다시 보내기 option, which Gradio shows under the chat's last message."""
    rows: list[dict[str, Any]] = [
        {"role": "assistant", "content": f"{HEAD} {md(failure.text)}"},
        {"role": "assistant", "content": md(failure.detail), "metadata": {"title": "기술 정보", "status": "done"}},
    ]
    if retry:
        rows[-1]["options"] = [{"value": RETRY, "label": "다시 보내기"}]
    return rows


def place(rows: list[dict[str, Any]], failure: Failure | None, session: ChatSession, idle: bool) -> None:
    """Put the notice of this session's failed reply into the chat `rows` (one per history message, then what
    streams or waits) right after the turns it followed; it offers 다시 보내기 while nothing came after it."""
    if failure is None or failure.session is not session or failure.at > len(session.history):
        return
    last = failure.at == len(session.history) and idle
    rows[failure.at : failure.at] = notice_rows(failure, last)
