"""A user trial's "not now" is no error: a session asked for too early, after the last one, or while another tab's
is open is said calmly in the page, where the person is looking (the note under the message box), not in a warning
toast. The words are messages.py's, as for every code."""

from __future__ import annotations

from chatbot.web.messages import korean_error
from models.errors import KeemError

CALM = ("study_wait", "study_done", "study_open_elsewhere")


def calm_notice(exc: BaseException) -> str | None:
    """The inline line for a study's refusal ('⏳ 다음 대화는 … 이후에 할 수 있습니다.'); None for anything else."""
    if isinstance(exc, KeemError) and exc.code in CALM:
        return f"⏳ {korean_error(exc)}"
    return None
