"""The page's handlers beyond ChatUI's, and their events: 다시 보내기 / 다시 생성 / 멈추기 (replies.py), the status
card after 대화 끝내기 (ending.py), the 지난 대화 tab (past.py) and the memory list's rows (editing.py)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from chatbot.web.actions import REPLY_ACTIONS
from chatbot.web.chat import ChatUI
from chatbot.web.editing import Editing
from chatbot.web.ending import Ending
from chatbot.web.past import Past
from chatbot.web.replies import Replies
from chatbot.web.state import UserState
from chatbot.web.view import Page, PageView

ANSWERED = ["chat", "hits", "note", *REPLY_ACTIONS]  # what a streamed reply changes (ChatUI.chat.respond)


class Flow:
    """The handlers, sharing ChatUI's AppContext."""

    def __init__(self, ui: ChatUI):
        self.ui = ui
        self.replies = Replies(ui.ctx)
        self.ending = Ending(ui.ctx, ui.chat)
        self.past = Past(ui.ctx)
        self.editing = Editing(ui.memory)

    def poll(self, state: UserState | None) -> PageView:
        """The progress timer's tick, as one event: the memory update's progress, and the memory tab once it is done
        (MemoryTab.poll, which tells a forgotten user), then the card's stages (Ending.tick). (Its name is the
        event's, which benchmarks/load.py drives.)"""
        view = self.ui.memory.poll(state)
        if state is None or view.state is None:  # nobody, or the tab's user is gone: the start screen shows
            return view
        return view | self.ending.tick(state)

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
