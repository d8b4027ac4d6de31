"""Memory editing in place, in the memory tab: every sentence of the current memory with 고치기 (an edit box that
holds the sentence) and 지우기 (which asks first). A change goes through the memory tab's own handlers
(chatbot/web/memory_tab.py MemoryTab.edit_sentence / delete_sentence): compare-and-swap on the version the row
showed, and every event re-checks who the tab is for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from chatbot.web.backend import AppContext
from chatbot.web.memory_tab import MemoryTab
from chatbot.web.render import md
from chatbot.web.state import UserState
from chatbot.web.view import PANEL, Page, PageView
from memory.store import Version
from models.errors import KeemError

EDITED = [*PANEL, "edit_text"]
ASK = "이 문장을 기억에서 지울까요? 새 기억 버전이 만들어지고, 버전 기록에 남습니다."


class Editing:
    """The rows' data and their changes; the rows themselves are built by `build`."""

    def __init__(self, ctx: AppContext, memory: MemoryTab):
        self.ctx, self.memory = ctx, memory

    def snapshot(self, state: UserState | None) -> PageView:
        """What the rows show, taken whenever the memory panel changes: the version's number and its sentences (an
        event of the tab's state like any other; the rows are built from this copy, not from the state)."""
        version = self.shown(state)
        return PageView(rows=None if version is None else (version.number, [s.text for s in version.sentences]))

    def shown(self, state: UserState | None) -> Version | None:
        """The memory the rows show: the tab's user's latest version (None: nobody, or no memory yet)."""
        if not isinstance(state, UserState) or not self.ctx.backend.done.is_set():
            return None
        try:
            if self.ctx.gone(state) is not None:
                return None
            return self.ctx.bot.engine.current(state.user_id)
        except KeemError:  # the models failed to load: the rows stay empty, the banner says why
            return None

    def saver(self, pick: str) -> Callable[[str, UserState | None], PageView]:
        def save_sentence(text: str, state: UserState | None) -> PageView:
            return self.memory.edit_sentence(pick, text, state)

        return save_sentence

    def deleter(self, pick: str) -> Callable[[UserState | None], PageView]:
        def delete_sentence(state: UserState | None) -> PageView:
            return self.memory.delete_sentence(pick, state)

        return delete_sentence


def toggle(*shown: bool) -> Callable[[], Any]:
    def show() -> Any:
        return [gr.update(visible=v) for v in shown]

    return show


def build(page: Page, editing: Editing) -> None:
    """The rows, rebuilt whenever the memory panel changes (a login, an update, an edit)."""
    page.add(rows=gr.State(None))  # filled by Editing.snapshot (wired in chatbot/web/flow.py)

    @gr.render(inputs=[page["rows"]], triggers=[page["rows"].change])
    def sentences(rows: tuple[int, list[str]] | None) -> None:
        if not rows:
            return
        number, texts = rows
        gr.Markdown("**문장마다 고치기 · 지우기**", elem_id="sentence-rows-title")
        for i, text in enumerate(texts):
            row(page, editing, f"{number}:{i}", i, text)


def row(page: Page, editing: Editing, pick: str, i: int, text: str) -> None:
    """One sentence: its text, 고치기 and 지우기; the edit box (prefilled), the delete question."""
    quick = {**page.options, "concurrency_limit": None, "show_progress": "hidden"}
    with gr.Group(elem_id=f"sentence-{i}"):
        with gr.Row(equal_height=True):
            gr.Markdown(f"{i + 1}\\. {md(text)}", elem_id=f"sentence-{i}-text")
            edit = gr.Button("고치기", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-edit")
            drop = gr.Button("지우기", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-delete")
        with gr.Row(visible=False, equal_height=True) as editor:
            box = gr.Textbox(
                value=text, show_label=False, max_lines=3, scale=5, interactive=True, elem_id=f"sentence-{i}-box"
            )
            save = gr.Button("저장", variant="primary", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-save")
            cancel = gr.Button("취소", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-cancel")
        with gr.Row(visible=False, equal_height=True) as asking:
            gr.Markdown(ASK)
            yes = gr.Button("지우기", variant="stop", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-yes")
            no = gr.Button("취소", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-no")
    edit.click(toggle(True, False), None, [editor, asking], **quick)
    drop.click(toggle(False, True), None, [editor, asking], **quick)
    cancel.click(toggle(False), None, [editor], **quick)
    no.click(toggle(False), None, [asking], **quick)
    page.on([save.click, box.submit], editing.saver(pick), [box, page["state"]], EDITED)
    page.on([yes.click], editing.deleter(pick), [page["state"]], EDITED)
