"""The accumulation baseline (MSC / "Beyond Goldfish Memory"): previous memory + this session's summary."""

from __future__ import annotations

from memory.prompts import prompt_hash
from memory.updaters.base import Progress, UpdateInput, UpdateResult, accumulate
from memory.updaters.keem import KeemUpdater


class AccumulateUpdater:
    """Nothing is ever removed or rewritten: one summarize call, appended."""

    name = "accumulate"

    def __init__(self, model, embedder=None, *, max_new_tokens: int = 512):
        self._summarizer = KeemUpdater(model, embedder, max_new_tokens=max_new_tokens)
        self.model = model

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        progress("summarizing")
        summary, generated = self._summarizer.summarize(inp)
        return UpdateResult(accumulate(inp.previous, summary), "ok" if generated else "fallback", model_spec=self.model.spec,
                            prompt_hash=prompt_hash("update_system", "summarize"), details={"summary": summary})
