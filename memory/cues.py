"""Memory cues: everyday words a later turn may use for a memory sentence, written by the update model.

'사용자는 남편이 지방으로 발령이 나서 주말부부로 지낸다' shares no word with '금요일 밤마다 KTX 타고 오는 사람 기다리는
게 일이야'; a language model knows that KTX and Friday nights belong to it, a small embedder does not. The cues are
embedded as a second view of the sentence in the user's index, and search scores a sentence by its better view
(doc2query-style expansion). Optional (KEEM_MEMORY_CUES): one extra model call per update, asked only for
sentences that have no cues yet, since unchanged sentences carry theirs over from the previous version.
"""

from __future__ import annotations

import re

from memory.prompts import prompt_hash, render
from memory.text import strip_wrappers
from memory.updaters.steps import Steps
from models.base import ChatModel

MAX_PER_CALL = 20  # sentences per model call
TOKENS_PER_SENTENCE = 48  # room for one line of 5-8 cue words
MAX_CUES = 10
MAX_CUE_CHARS = 20
CUES_PROMPT_HASH = prompt_hash("update_system", "cues")  # recorded on the version that got the cues
_LINE = re.compile(r"^\s*(\d{1,3})\s*[.:)\]]\s*(.+?)\s*$")
_SPLIT = re.compile(r"[,，、/·;]")
_WORDLIKE = re.compile(r"[0-9A-Za-z\uac00-\ud7a3]")


def parse_cues(reply: str, count: int) -> dict[int, list[str]]:
    """'N: word, word, ...' lines -> {N-1: [word, word]}; numbers outside 1..count, repeats and empty lines dropped."""
    found: dict[int, list[str]] = {}
    for line in reply.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        index = int(m.group(1)) - 1
        if not 0 <= index < count or index in found:
            continue
        words = [w.replace("\ufffd", "").strip(" \t\"'`*-.") for w in _SPLIT.split(m.group(2))]
        words = [w for w in dict.fromkeys(words) if w and len(w) <= MAX_CUE_CHARS and _WORDLIKE.search(w)]
        if words:
            found[index] = words[:MAX_CUES]
    return found


class CueWriter:
    """Asks the model for cue words, MAX_PER_CALL sentences per call. One writer serves every job of the update pool:
    it keeps no state between calls (each call has its own Steps), so concurrent jobs never see each other's
    problems."""

    def __init__(self, model: ChatModel):
        self.model = model

    def calls(self, count: int) -> int:
        """The model calls `write` makes for `count` sentences: one per MAX_PER_CALL (none for a model not asked)."""
        return Steps.for_model(self.model).calls(-(-count // MAX_PER_CALL))

    def write(self, texts: list[str], problems: list[str] | None = None) -> dict[str, str]:
        """{sentence text: cue words} for the sentences it got cues for; `problems`, when given, receives this
        call's model problems (answers cut at their budget, prompts too long), which cost those cues."""
        steps = Steps.for_model(self.model, problems=[] if problems is None else problems)
        texts = list(dict.fromkeys(t for t in texts if t.strip()))
        cues: dict[str, str] = {}
        for start in range(0, len(texts), MAX_PER_CALL):
            chunk = texts[start : start + MAX_PER_CALL]
            reply = steps.call("cues", render("cues", sentences=chunk), TOKENS_PER_SENTENCE * len(chunk))
            for i, words in parse_cues(strip_wrappers(reply or ""), len(chunk)).items():  # a cut reply: no cues
                new = [w for w in words if w not in chunk[i]]  # words of the sentence add nothing
                if new:
                    cues[chunk[i]] = ", ".join(new)
        return cues
