"""The KEEM updater: summarize -> reflect emotions and causes -> generate the integrated memory -> guard -> verify.

The steps are memory/updaters/steps.py's, shared with the dataset builder. A failed verification retries the
update once, then falls back to accumulation (previous memory + reflected summary) with status `fallback`, and
the version's note says why. Nothing here ever returns a memory smaller than the previous one without the
deletion guard's consent, and no answer cut at its token budget becomes memory.
"""

from __future__ import annotations

from typing import Any

from memory.store import Sentence, note
from memory.text import format_dialogue
from memory.updaters.base import Progress, UpdateInput, UpdateResult, accumulate
from memory.updaters.steps import DEFAULT_CEILING, Steps
from models.base import ChatModel
from models.embedders import Embedder


class KeemUpdater:
    """Keeps no state between updates (each has its own Steps, which record its problems), so one instance may serve
    concurrent jobs."""

    name = "keem"

    def __init__(
        self,
        model: ChatModel,
        embedder: Embedder | None = None,
        *,
        max_new_tokens: int = DEFAULT_CEILING,
        attempts: int = 2,
    ):
        self.model, self.embedder, self.max_new_tokens = model, embedder, max_new_tokens
        self.attempts = attempts

    def new_steps(self) -> Steps:
        """The steps of one update (they record its problems): every update has its own."""
        return Steps.for_model(self.model, self.embedder, ceiling=self.max_new_tokens)

    def calls(self, inp: UpdateInput) -> int:
        """The model calls `update(inp)` makes when its answers are good (memory/updaters/base.py Updater.calls):
        summarize and reflect; a first memory is the reflected summary, verified; a later one goes through
        `Steps.update`; then records."""
        steps = self.new_steps()
        rewrite = steps.update_calls([s.text for s in inp.previous]) if inp.previous else steps.calls()
        return steps.calls(2) + rewrite + steps.record_calls()

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        """The new memory, with its emotion-and-cause records (the shared step every strategy calls)."""
        steps = self.new_steps()
        return steps.with_records(inp, self.rewrite(steps, inp, progress))

    def rewrite(self, steps: Steps, inp: UpdateInput, progress: Progress) -> UpdateResult:
        progress("summarizing")
        summary, generated_summary = steps.summarize(inp.dialogue, inp.session_date)
        progress("reflecting")
        reflected = steps.reflect(inp.dialogue, summary) if generated_summary else summary
        details: dict[str, object] = {
            "summary": summary,
            "reflected": reflected,
            "attempts": [],
            "problems": steps.problems,
        }
        base: dict[str, Any] = dict(model_spec=self.model.spec, prompt_hash=steps.prompt_hash())
        if not generated_summary:
            progress("fallback")
            return UpdateResult(
                accumulate(inp.previous, reflected),
                "fallback",
                notes=[steps.because("no_summary")],
                # not_asked: never asked (ChatModel.runs_to_budget, the demo); no_summary: it wrote nothing usable
                details={**details, "fallback": "not_asked" if steps.not_asked else "no_summary"},
                **base,
            )
        if not inp.previous:
            progress("verifying")
            problem = steps.verify([], format_dialogue(inp.dialogue), reflected, inp.session_date)
            details["attempts"] = [{"memory": reflected, "problem": problem}]
            if problem is not None:
                details["fallback"] = "not_verified"
            return UpdateResult(
                [Sentence(t, "added") for t in reflected],
                "ok" if problem is None else "fallback",
                notes=[] if problem is None else [note("first_not_verified", problem=problem)],
                details=details,
                **base,
            )
        sentences, more = steps.update(
            inp.previous,
            reflected,
            inp.dialogue,
            session_date=inp.session_date,
            previous_date=inp.previous_date,
            attempts=self.attempts,
            progress=progress,
        )
        details.update(more)
        if sentences is not None:
            return UpdateResult(sentences, "ok", details=details, **base)
        progress("fallback")
        problem = more["attempts"][-1]["problem"] if more["attempts"] else "no attempt"
        return UpdateResult(
            accumulate(inp.previous, reflected),
            "fallback",
            details={**details, "fallback": "not_verified"},
            notes=[steps.because("not_verified", attempts=self.attempts, problem=problem)],
            **base,
        )
