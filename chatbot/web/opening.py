"""The page's side of a friend who asks first (chatbot/opening.py): chained after a login and after "새 대화", it
streams the session's follow-up question into the chat like a reply, then answers whatever the user typed
meanwhile (Conversation.respond). Nothing due, openings off, or a session already under way: nothing shows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from chatbot.opening import due_opening, open_session
from chatbot.web.actions import REPLY_ACTIONS, actions
from chatbot.web.backend import AppContext, for_user
from chatbot.web.chat import Conversation, rows, stream_frames, waiting_note
from chatbot.web.state import UserState
from chatbot.web.view import Page, PageView
from models.errors import UserForgottenError

log = logging.getLogger(__name__)


class Opening:
    def __init__(self, ctx: AppContext, chat: Conversation):
        self.ctx, self.chat = ctx, chat

    @for_user(PageView)  # no login: nothing to ask; a forgotten user's tab: the notice and the start screen
    def open(self, state: UserState) -> Iterator[PageView]:
        """Stream the tab's opening question, if one is due (the event re-checks whose tab it is first)."""
        claimed = state.claim_opening(due_opening)  # a message sent meanwhile waits for `respond` below
        if claimed is None:
            yield PageView()
            return
        session, record = claimed
        opening = open_session(session, record)
        try:
            current = state.begin_reply(session, len(session.history) - 1, "")
            yield actions(state)  # 멈추기 while it streams
            # paced with the replies; 멈추기: what was shown (and the last piece) is kept as the opening
            yield from stream_frames(self.ctx, state, current, opening)
        except UserForgottenError:
            raise
        except Exception:  # the opening is a courtesy: the conversation goes on without it
            log.exception("opening failed")
        finally:
            opening.close()  # stored as far as it streamed (chatbot/opening.py)
            state.finish()
        yield PageView(chat=rows(state), note=waiting_note(state)) | actions(state)
        yield from self.chat.respond(state)


def wire_openings(page: Page, opening: Opening, events: list[Any]) -> None:
    """The opening after each event that opens a session (a login, a study's admission, "새 대화")."""
    for event in events:
        page.stream(
            opening.open,
            ["chat", "hits", "note", *REPLY_ACTIONS],
            after=event,
            show_progress="hidden",
        )
