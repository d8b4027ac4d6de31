"""The page's side of ZeroGPU (chatbot/deploy/zerogpu.py): there a user's memory updates run in that user's own
events, chained after each event that starts, ends or renews a conversation. The progress line shows each stage
(Flow.watch, chained after the same events and after this one, refreshes the memory tab when the update is done);
an update ZeroGPU stops stays pending (or failed, after its last try) and the progress line says which in Korean
(chatbot/web/messages.py, code `gpu_stopped`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from chatbot.web.backend import AppContext, for_user
from chatbot.web.messages import GPU_CONTINUES, GPU_GAVE_UP, korean_error
from chatbot.web.state import UserState
from chatbot.web.view import Page, PageView
from models.errors import UserForgottenError

log = logging.getLogger(__name__)


class CatchUp:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def run(self, state: UserState | None) -> Iterator[PageView]:
        """Run this tab's user's waiting memory updates, oldest first (the event re-checks whose tab it is first)."""
        if self.ctx.zero is None or self.ctx.backend.bot is None:  # not on ZeroGPU, or nothing loaded to check with
            yield PageView()
            return
        yield from self._run(state)

    @for_user(PageView)
    def _run(self, state: UserState) -> Iterator[PageView]:
        zero = self.ctx.zero
        assert zero is not None  # `run` checked
        for job in self.ctx.bot.store.queue.jobs(state.user_id, statuses=("pending",)):
            state.follow_first(job["id"])  # the progress line follows the first one
            try:
                zero.run(job["id"])
            except UserForgottenError:  # forgotten while it ran: the wiring shows the notice
                raise
            except Exception as exc:  # recorded on the job: pending for the next event, or failed after its last try
                log.warning("memory update job %s stopped on ZeroGPU: %s", job["id"], exc)
                state.job_done()
                pending = self.ctx.bot.store.queue.get(job["id"])["status"] == "pending"
                then = GPU_CONTINUES if pending else GPU_GAVE_UP
                yield PageView(progress=f"{korean_error(exc)} {then}")
                return
        yield PageView()


def wire_catch_up(page: Page, catch_up: CatchUp, events: list[Any]) -> list[Any]:
    """After each of these events (a login or a study's admission, 대화 끝내기, 새 대화, 실패한 갱신 다시 시도), run
    the user's waiting updates; returns the catch-up events (the page follows what they did after each)."""
    return [
        page.on(None, catch_up.run, [page["state"]], ["progress"], after=event, show_progress="hidden")
        for event in events
    ]
