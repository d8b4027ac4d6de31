"""The operation baseline (CareCallmem / "Keep Me Updated!"): per summary sentence, PASS / APPEND / DELETE / REPLACE.

Calls per update: 1 (summarize) + one per summary sentence (typically 3-8) + the records call (tried again when it
fails). KEEM makes 4 (summarize, reflect, update, verify), plus one for all the pairs the deletion guard judges,
plus those 3 again when verification retries, plus the records call. `calls` on each updater counts them.
Like the original, this baseline has no deletion guard: DELETE and REPLACE erase what they erase.
A memory too large for one call (steps.py's ceiling) is shown in part: the sentences the summary sentence
touches, numbered within that part; every other sentence stays as it is.
"""

from __future__ import annotations

import re

from memory.prompts import prompt_hash, render
from memory.store import Sentence
from memory.text import strip_wrappers
from memory.updaters.base import Progress, UpdateInput, UpdateResult, carry_over
from memory.updaters.steps import DEFAULT_CEILING, MAX_SUMMARY, Steps
from models.base import ChatModel
from models.embedders import Embedder

ANSWER_TOKENS = 64  # "REPLACE 12", with room for the reasoning or preamble real models put first

OPERATION = re.compile(r"^\s*(PASS|APPEND|REPLACE|DELETE)\b\s*(\d+)?", re.I)


def parse_operation(answer: str, size: int) -> tuple[str, int | None]:
    """('REPLACE', index) etc. from the first line that names an operation; anything unparseable or out of range
    is APPEND, so nothing new is lost."""
    match = next((m for m in map(OPERATION.match, answer.splitlines()) if m), None)
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
        return list(memory) if sentence in {s.text for s in memory} else [*memory, Sentence(sentence, "added")]
    assert index is not None
    old = memory[index]
    if op == "REPLACE":
        return [*memory[:index], Sentence(sentence, "rewritten", old.origin_id), *memory[index + 1 :]]
    return [*memory[:index], *memory[index + 1 :]]  # DELETE


class OperationsUpdater:
    name = "operations"

    def __init__(self, model: ChatModel, embedder: Embedder | None = None, *, max_new_tokens: int = DEFAULT_CEILING):
        self.model, self.embedder, self.max_new_tokens = model, embedder, max_new_tokens

    def new_steps(self) -> Steps:
        """The steps of one update (they record its problems): every update has its own."""
        return Steps.for_model(self.model, self.embedder, ceiling=self.max_new_tokens)

    @staticmethod
    def choose(steps: Steps, memory: list[Sentence], sentence: str) -> tuple[str, str, int | None, bool]:
        """(the answer, the operation, the index in `memory`, whether only part of the memory was shown) for one
        summary sentence; a cut or unusable answer is APPEND, so nothing new is lost."""
        shown = steps.scope(memory, [sentence], [])
        part = list(range(len(memory))) if shown is None else shown
        answer = steps.call(
            "operations", render("operations", memory=[memory[i].text for i in part], sentence=sentence), ANSWER_TOKENS
        )
        op, index = parse_operation(strip_wrappers(answer or ""), len(part))
        return answer or "", op, None if index is None else part[index], shown is not None

    def calls(self, inp: UpdateInput) -> int:
        """The model calls `update(inp)` makes when its answers are good: summarize; with a previous memory, one
        choice per summary sentence (not known before the summary is: counted as one per user turn, at most
        MAX_SUMMARY); then the records."""
        steps = self.new_steps()
        said = sum(turn["role"] == "user" for turn in inp.dialogue)
        return steps.calls(1 + (min(said, MAX_SUMMARY) if inp.previous else 0)) + steps.record_calls()

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        steps = self.new_steps()
        progress("summarizing")
        summary, generated = steps.summarize(inp.dialogue, inp.session_date)
        progress("updating")
        # kept, with their stored vectors: the scope of each answer ranks them without embedding them again
        memory = carry_over(inp.previous)
        operations = []
        for sentence in summary:
            answer, op, index, scoped = "", "APPEND", None, False
            if inp.previous:  # the first session's memory is its summary
                answer, op, index, scoped = self.choose(steps, memory, sentence)
            operations.append(
                {
                    "sentence": sentence,
                    "answer": answer.strip()[:40],
                    "operation": op,
                    "target": None if index is None else memory[index].text,
                    "scoped": scoped,
                }
            )
            memory = apply_operation(memory, sentence, op, index)
        if not memory:  # every sentence deleted: a version is never empty, keep the summary
            memory = [Sentence(t, "added") for t in summary]
        result = UpdateResult(
            memory,
            "ok" if generated else "fallback",
            model_spec=self.model.spec,
            prompt_hash=prompt_hash("update_system", "summarize", "operations", "emotions"),
            notes=[] if generated else [steps.because("no_summary")],
            details={
                "summary": summary,
                "operations": operations,
                "problems": steps.problems,
                **({} if generated else {"fallback": "not_asked" if steps.not_asked else "no_summary"}),
            },
        )
        return steps.with_records(inp, result)
