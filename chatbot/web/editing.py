"""The memory tab's one list of the current memory: its header, then every sentence once, numbered, with its actions
in its row: 고치기 (an edit box that holds the sentence), 지우기 (which asks first), 왜? (where it came from) and
완전히 지우기 (erasure from every version and the turns that said it: an explicit confirmation, it cannot be undone).
A change goes through the memory tab's own handlers (chatbot/web/memory_tab.py MemoryTab): compare-and-swap on the
version the row showed, and every event re-checks who the tab is for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from chatbot.web.memory_list import MemoryList, Row
from chatbot.web.memory_tab import MemoryTab
from chatbot.web.state import UserState
from chatbot.web.view import PANEL, Page, PageView

ASK = "이 문장을 기억에서 지울까요? 새 기억 버전이 만들어지고, 버전 기록에 남습니다."
ERASE = (
    "**완전히 지우기**: 이 문장을 모든 기억 버전에서 지우고, 그 내용을 말한 대화를 [삭제됨]으로 바꿉니다. "
    "서버에 사본이 남지 않으며 **되돌릴 수 없습니다**."
)
SURE = "확인: 되돌릴 수 없다는 것을 알고 완전히 지웁니다"


class Editing:
    """The rows' changes, each made on the version the row showed ("version:index")."""

    def __init__(self, memory: MemoryTab):
        self.memory = memory

    def saver(self, pick: str) -> Callable[[str, UserState | None], PageView]:
        def save_sentence(text: str, state: UserState | None) -> PageView:
            return self.memory.edit_sentence(pick, text, state)

        return save_sentence

    def deleter(self, pick: str) -> Callable[[UserState | None], PageView]:
        def delete_sentence(state: UserState | None) -> PageView:
            return self.memory.delete_sentence(pick, state)

        return delete_sentence

    def eraser(self, pick: str) -> Callable[[bool, UserState | None], PageView]:
        def erase_sentence(sure: bool, state: UserState | None) -> PageView:
            return self.memory.erase_sentence(pick, sure, state)

        return erase_sentence


def toggle(*shown: bool) -> Callable[[], Any]:
    def show() -> Any:
        return [gr.update(visible=v) for v in shown]

    return show


def build(page: Page, editing: Editing) -> None:
    """The list, redrawn whenever what it shows changes (a login, an update, an edit: the panel sets `memory`)."""
    page.add(memory=gr.State(None))

    @gr.render(inputs=[page["memory"]], triggers=[page["memory"].change])
    def memory_list(shown: MemoryList | None) -> None:
        if shown is None:
            return
        gr.Markdown(shown.header, elem_id="memory-head")
        for i, r in enumerate(shown.rows):
            row(page, editing, f"{shown.number}:{i}", i, r)


def ticked(sure: bool) -> dict:
    """The erasure's confirming button takes clicks only while its box is ticked."""
    return gr.update(interactive=sure is True)


def row(page: Page, editing: Editing, pick: str, i: int, r: Row) -> None:
    """One sentence: its text and its four actions; under it, folded, the edit box (prefilled), the delete question,
    its provenance and the erasure's confirmation (one open at a time)."""
    quick = {**page.options, "concurrency_limit": None, "show_progress": "hidden"}
    state = page["state"]
    with gr.Group(elem_id=f"sentence-{i}", elem_classes=["keem-sentence"]):
        with gr.Row(equal_height=True, elem_classes=["keem-sentence-row"]):
            gr.Markdown(r.shown, elem_id=f"sentence-{i}-text", elem_classes=["keem-sentence-text"])
            with gr.Row(elem_classes=["keem-sentence-actions"]):
                # the two destructive actions apart: 왜? between them, 완전히 지우기 last with a gap before it
                edit = gr.Button("고치기", size="sm", min_width=60, elem_id=f"sentence-{i}-edit")
                drop = gr.Button("지우기", size="sm", min_width=60, elem_id=f"sentence-{i}-delete")
                why = gr.Button("왜?", size="sm", min_width=50, elem_id=f"sentence-{i}-why-button")
                erase = gr.Button(
                    "완전히 지우기",
                    size="sm",
                    min_width=100,
                    elem_id=f"sentence-{i}-erase-button",
                    elem_classes=["keem-erase"],
                )
        with gr.Row(visible=False, equal_height=True) as editor:
            box = gr.Textbox(
                value=r.text, show_label=False, max_lines=3, scale=5, interactive=True, elem_id=f"sentence-{i}-box"
            )
            save = gr.Button("저장", variant="primary", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-save")
            cancel = gr.Button("취소", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-cancel")
        with gr.Row(visible=False, equal_height=True) as asking:
            gr.Markdown(ASK)
            yes = gr.Button("지우기", variant="stop", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-yes")
            no = gr.Button("취소", size="sm", scale=0, min_width=70, elem_id=f"sentence-{i}-no")
        with gr.Column(visible=False) as source:
            gr.Markdown(r.why or "출처 기록이 없는 문장입니다.", elem_id=f"sentence-{i}-why")
            close = gr.Button("접기", size="sm", elem_id=f"sentence-{i}-why-close")
        with gr.Column(visible=False) as erasing:
            gr.Markdown(ERASE)
            sure = gr.Checkbox(label=SURE, value=False, elem_id=f"sentence-{i}-sure")
            with gr.Row():
                # off until its box is ticked (as the consent's agree button): it never takes a click it refuses
                confirmed = gr.Button(
                    "완전히 지우기", variant="stop", size="sm", interactive=False, elem_id=f"sentence-{i}-erase"
                )
                back = gr.Button("취소", size="sm", elem_id=f"sentence-{i}-erase-cancel")
    folds = [editor, asking, source, erasing]
    for button, opened in ((edit, 0), (drop, 1), (why, 2), (erase, 3)):
        button.click(toggle(*(k == opened for k in range(4))), None, folds, **quick)
    for button, fold in ((cancel, editor), (no, asking), (close, source), (back, erasing)):
        button.click(toggle(False), None, [fold], **quick)
    page.on([save.click, box.submit], editing.saver(pick), [box, state], PANEL)
    page.on([yes.click], editing.deleter(pick), [state], PANEL)
    page.on([confirmed.click], editing.eraser(pick), [sure, state], PANEL)
    sure.change(ticked, [sure], [confirmed], **quick)
