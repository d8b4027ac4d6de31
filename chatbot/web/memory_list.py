"""The memory tab's one list of the current memory, as data: the header (version, time with its zone, who made it,
size) and one row per sentence (its text, how the row shows it, where it came from). The memory tab's panel makes it
(chatbot/web/memory_tab.py); the rows with their actions are drawn from it (chatbot/web/editing.py).

A value of plain tuples and strings: Gradio hashes a State's value to decide whether it changed, so the rows are
redrawn only when what they show changes (a refresh with the same memory leaves an open edit box alone)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chatbot.localtime import LocalTime
from chatbot.web.render import memory_header, render_sentences
from chatbot.web.why import render_why
from memory.provenance import Why
from memory.store import Version


@dataclass(frozen=True)
class Row:
    text: str  # the sentence as stored (what its edit box starts with)
    shown: str  # Markdown: numbered, an emotion marked, its search cues
    why: str  # where it came from (HTML), opened by the row's "왜?"


@dataclass(frozen=True)
class MemoryList:
    number: int | None  # the version the rows show (a row's change is made on it); None: no memory yet
    header: str  # Markdown
    rows: tuple[Row, ...] = ()

    @property
    def text(self) -> str:
        """What the list says, header and sentences, as Markdown."""
        return "\n\n".join([self.header, *(r.shown for r in self.rows)])


def memory_list(version: Version | None, whys: Sequence[Why], local: LocalTime) -> MemoryList:
    """The list of `version` (the user's latest), each sentence with its provenance (`whys`, in its order)."""
    if version is None:
        return MemoryList(None, memory_header(None, local))
    why = {w.number: render_why(w, local) for w in whys}
    rows = tuple(
        Row(s.text, shown, why.get(i, ""))
        for i, (s, shown) in enumerate(zip(version.sentences, render_sentences(version, local.today()), strict=True), 1)
    )
    return MemoryList(version.number, memory_header(version, local), rows)
