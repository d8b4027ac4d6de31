"""The accumulation baseline (MSC / "Beyond Goldfish Memory"): previous memory + this session's summary."""

from __future__ import annotations

from memory.prompts import prompt_hash
from memory.updaters.base import Progress, UpdateInput, UpdateResult, accumulate
from memory.updaters.steps import DEFAULT_CEILING, Steps
from models.base import ChatModel
from models.embedders import Embedder


class AccumulateUpdater:
    """Nothing is ever removed or rewritten: one summarize call (the shared step), appended. Keeps no state between
    updates, so one instance may serve concurrent jobs."""

    name = "accumulate"

    def __init__(self, model: ChatModel, embedder: Embedder | None = None, *, max_new_tokens: int = DEFAULT_CEILING):
        self.model, self.embedder, self.max_new_tokens = model, embedder, max_new_tokens

    def new_steps(self) -> Steps:
        """The steps of one update (they record its problems): every update has its own."""
        return Steps.for_model(self.model, self.embedder, ceiling=self.max_new_tokens)

    def calls(self, inp: UpdateInput) -> int:
        """The model calls `update(inp)` makes when its answers are good: summarize, then the records."""
        steps = self.new_steps()
        return steps.calls() + steps.record_calls()

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        steps = self.new_steps()
        progress("summarizing")
        summary, generated = steps.summarize(inp.dialogue, inp.session_date)
        result = UpdateResult(
            accumulate(inp.previous, summary),
            "ok" if generated else "fallback",
            model_spec=self.model.spec,
            prompt_hash=prompt_hash("update_system", "summarize", "emotions"),
            notes=[] if generated else [steps.because("no_summary")],
            details={"summary": summary, "problems": steps.problems},
        )
        return steps.with_records(inp, result)
