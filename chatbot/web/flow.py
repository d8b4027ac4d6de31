"""The page's handlers beyond ChatUI's, and their events: 다시 보내기 / 다시 생성 / 멈추기 (replies.py), the status
card after 대화 끝내기 (ending.py), the 지난 대화 tab (past.py) and the memory list's rows (editing.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import gradio as gr

from chatbot.web.actions import REPLY_ACTIONS
from chatbot.web.chat import ChatUI
from chatbot.web.editing import Editing
from chatbot.web.ending import Ending
from chatbot.web.past import Past
from chatbot.web.render import stage_text
from chatbot.web.replies import Replies
from chatbot.web.state import UserState
from chatbot.web.view import PANEL, Page, PageView

ANSWERED = ["chat", "hits", "note", *REPLY_ACTIONS]  # what a streamed reply changes (ChatUI.chat.respond)
FOLLOWED = ["progress", *PANEL, "steps"]  # what following an update changes (Flow.watch)
WATCH_S = 1.0  # how often a followed update's progress is read
WATCH_LIMIT_S = 3600.0  # a tab stops following one update after this long (a queue stuck with no worker)


class Flow:
    """The handlers, sharing ChatUI's AppContext."""

    def __init__(self, ui: ChatUI):
        self.ui = ui
        self.replies = Replies(ui.ctx)
        self.ending = Ending(ui.ctx, ui.chat)
        self.past = Past(ui.ctx)
        self.editing = Editing(ui.memory)
        self.watched: set[int] = set()  # the events a watch is chained after

    def poll(self, state: UserState | None, job: dict[str, Any] | None = None) -> PageView:
        """One look at the tab's memory update: its progress, and the memory tab once it is done (MemoryTab.poll,
        which tells a forgotten user), then the card's stages (Ending.tick). `job`: the followed job as just read."""
        job = job or self.ui.memory.followed(state)  # read once, for the progress line and the card
        view = self.ui.memory.poll(state, job)
        if state is None or view.state is None:  # nobody, or the tab's user is gone: the start screen shows
            return view
        return view | self.ending.tick(state, job)

    async def watch(self, state: UserState | None) -> AsyncIterator[PageView]:
        """Follow the tab's memory update until it is done, in one event held open (chained after each event that
        gives the tab an update to follow): the store is read every WATCH_S in a thread, and a frame goes to the
        page only when the progress line or the card's stages change; the last one brings the memory tab. A read
        that finds the job as it was (its status, stage and tries) costs one indexed lookup and nothing more; any
        change, or the job gone (a forgotten user's jobs go with them), gets the whole look with the tab's guard.
        A tab polling instead cost the app a queued event a second (docs/scaling.md). A newer watch of the same tab
        (a second 대화 끝내기, a retry) takes over; after WATCH_LIMIT_S the memory tab still shows the update. (Its
        name is the event's, which benchmarks/load.py drives.)"""
        if state is None or state.job_id is None:
            yield PageView()
            return
        me, shown, deadline = state.watch(), None, time.monotonic() + WATCH_LIMIT_S
        seen: tuple[Any, ...] | None = None
        while state.watcher == me and time.monotonic() < deadline:
            job = await asyncio.to_thread(self.ui.memory.followed, state)
            if job is not None and (job["status"], job["stage"], job["attempts"]) == seen:
                await asyncio.sleep(WATCH_S)
                continue
            seen = None if job is None else (job["status"], job["stage"], job["attempts"])
            view = await asyncio.to_thread(self.poll, state, job)
            gone = view.state is None
            done = gone or state.job_id is None
            # taken over while it read (a retry, a second 대화 끝내기 of the tab): a frame of the job still running
            # may be older than the new watch's last (its 완료, then this one's 대기 after it, and 대기 stayed); one
            # that found the job finished is the last word and goes, as the new watch then finds nothing to follow
            if state.watcher != me and not (gone or job is None or stage_text(job)[1]):
                return
            now = (view.progress, view.steps)
            if done or now != shown:
                yield view
                shown = now
            if done:
                return
            await asyncio.sleep(WATCH_S)

    def watch_after(self, page: Page, event: Any) -> Any:
        """Follow the update an event gave the tab (대화 끝내기, 실패한 갱신 다시 시도, a login while one runs, a
        ZeroGPU catch-up)."""
        self.watched.add(id(event))
        return page.on(
            None, self.watch, [page["state"]], FOLLOWED, after=event, concurrency_limit=None, show_progress="hidden"
        )

    def watches(self, event: Any) -> bool:
        """Whether a watch follows `event` already (watch_after)."""
        return id(event) in self.watched

    def answer_after(self, page: Page, event: Any) -> None:
        """Stream the replies an event asked for (a message sent, 다시 생성, 다시 보내기): one respond per tab at a
        time; a second returns at once, the first answers everything waiting."""
        page.stream(
            self.ui.chat.respond,
            ANSWERED,
            after=event,
            trigger_mode="multiple",
            show_progress="minimal",
        )

    def wire(self, page: Page) -> None:
        """The events of the replies, the card's stages and the past conversations (ending a
        conversation and starting the next are wired with the chat page's: chatbot/web/app.py `wire`)."""
        p, state = page, page["state"]
        asked = ["chat", "note", *REPLY_ACTIONS]
        again = p.on([p["regenerate"].click, p["chat"].retry], self.replies.again, [state], asked)
        self.answer_after(p, again)
        picked = p.on([p["chat"].option_select], self.replies.option, [state], asked)
        self.answer_after(p, picked)
        # not behind the streaming replies: a stop must reach the reply it stops
        stopped = ["note", "stop"]
        p.on([p["stop"].click], self.replies.stop, [state], stopped, concurrency_limit=None, show_progress="hidden")
        p.on([p["chat"].clear], self.replies.redraw, [state], ["chat"])
        p.on([p["past_tab"].select], self.past.listing, [state], ["past_pick", "transcript"])
        p.on([p["past_pick"].input], self.past.show, [p["past_pick"], state], ["transcript"])
        p.on([p["to_memory"].click], to_memory, None, ["tabs"], concurrency_limit=None, show_progress="hidden")


def to_memory() -> PageView:
    """The used-memory panel's link: open the memory tab."""
    return PageView(tabs=gr.Tabs(selected="memory-tab"))
