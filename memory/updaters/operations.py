"""The operation baseline (CareCallmem / "Keep Me Updated!"): per summary sentence, PASS / APPEND / DELETE / REPLACE.

Calls per update: 1 (summarize) + one per summary sentence (typically 3-8). KEEM makes 4 (summarize, reflect,
update, verify), plus one per dropped sentence the deletion guard judges, plus 2 when verification retries.
Like the original, this baseline has no deletion guard: DELETE and REPLACE erase what they erase.
"""

from __future__ import annotations

import re

from memory.prompts import prompt_hash, render
from memory.store import Sentence
from memory.updaters.base import Progress, UpdateInput, UpdateResult, ask
from memory.updaters.keem import KeemUpdater
from models.base import ChatModel
from models.embedders import Embedder

OPERATION = re.compile(r"^\s*(PASS|APPEND|REPLACE|DELETE)\b\s*(\d+)?", re.I)


def parse_operation(answer: str, size: int) -> tuple[str, int | None]:
    """('REPLACE', index) etc.; anything unparseable or out of range is APPEND, so nothing new is lost."""
    match = OPERATION.match(answer.strip())
    if not match:
        return "APPEND", None
    op, number = match.group(1).upper(), match.group(2)
    if op in ("REPLACE", "DELETE"):
        if number is None or not 1 <= int(number) <= size:
            return "APPEND", None
        return op, int(number) - 1
    return op, None


def apply_operation(memory: list[Sentence], sentence: str, op: str, index: int | None) -> list[Sentence]:
    """The memory after one operation (a new list)."""
    if op == "PASS":
        return list(memory)
    if op == "APPEND":
        return [*memory, Sentence(sentence, "added")]
    assert index is not None
    old = memory[index]
    if op == "REPLACE":
        return [*memory[:index], Sentence(sentence, "rewritten", old.origin_id), *memory[index + 1:]]
    return [*memory[:index], *memory[index + 1:]]  # DELETE


class OperationsUpdater:
    name = "operations"

    def __init__(self, model: ChatModel, embedder: Embedder | None = None, *, max_new_tokens: int = 512):
        self.model = model
        self._summarizer = KeemUpdater(model, embedder, max_new_tokens=max_new_tokens)

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        progress("summarizing")
        summary, generated = self._summarizer.summarize(inp)
        progress("updating")
        memory = [Sentence(s.text, "kept", s.id) for s in inp.previous]
        operations = []
        for sentence in summary:
            answer, op, index = "", "APPEND", None
            if inp.previous:  # the first session's memory is its summary
                answer = ask(self.model, render("update_system"),
                             render("operations", memory=[s.text for s in memory], sentence=sentence), 8)
                op, index = parse_operation(answer, len(memory))
            operations.append({"sentence": sentence, "answer": answer.strip()[:40], "operation": op,
                               "target": None if index is None else memory[index].text})
            memory = apply_operation(memory, sentence, op, index)
        if not memory:  # every sentence deleted: a version is never empty, keep the summary
            memory = [Sentence(t, "added") for t in summary]
        return UpdateResult(memory, "ok" if generated else "fallback", model_spec=self.model.spec,
                            prompt_hash=prompt_hash("update_system", "summarize", "operations"),
                            details={"summary": summary, "operations": operations})
