"""The accumulation baseline (MSC / "Beyond Goldfish Memory"): previous memory + this session's summary."""

from __future__ import annotations

from memory.prompts import prompt_hash
from memory.updaters.base import Progress, UpdateInput, UpdateResult, accumulate
from memory.updaters.steps import DEFAULT_CEILING, Steps
from models.base import ChatModel
from models.embedders import Embedder


class AccumulateUpdater:
    """Nothing is ever removed or rewritten: one summarize call (the shared step), appended."""

    name = "accumulate"

    def __init__(self, model: ChatModel, embedder: Embedder | None = None, *, max_new_tokens: int = DEFAULT_CEILING):
        self.steps = Steps.for_model(model, embedder, ceiling=max_new_tokens)
        self.model = model

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        self.steps.problems = []
        progress("summarizing")
        summary, generated = self.steps.summarize(inp.dialogue, inp.session_date)
        return UpdateResult(
            accumulate(inp.previous, summary),
            "ok" if generated else "fallback",
            model_spec=self.model.spec,
            prompt_hash=prompt_hash("update_system", "summarize"),
            note=None
            if generated
            else self.steps.why("the update model wrote no usable summary; kept the user's own words"),
            details={"summary": summary, "problems": self.steps.problems},
        )
