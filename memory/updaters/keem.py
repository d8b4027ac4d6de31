"""The KEEM updater: summarize -> reflect emotions and causes -> generate the integrated memory -> verify.

A failed verification retries the update once, then falls back to accumulation (previous memory +
reflected summary) with status `fallback`. Nothing here ever returns a memory smaller than the
previous one without the deletion guard's consent.
"""

from __future__ import annotations

from memory.prompts import prompt_hash, render
from memory.store import Sentence
from memory.updaters.base import (Progress, UpdateInput, UpdateResult, accumulate, ask, elapsed_text,
                                  extractive_summary, format_dialogue, parse_sentences)
from memory.updaters.guard import decisions_json, guard
from models.base import ChatModel
from models.embedders import Embedder
from models.errors import InputError

PROMPTS = ("update_system", "summarize", "reflect", "update", "verify", "guard")


class KeemUpdater:
    """One instance per update job (it records the job's problems; not shared between threads)."""

    name = "keem"

    def __init__(self, model: ChatModel, embedder: Embedder | None = None, *, max_new_tokens: int = 512,
                 attempts: int = 2):
        self.model = model
        self.embedder = embedder
        self.max_new_tokens = max_new_tokens
        self.attempts = attempts
        self.problems: list[str] = []

    def _ask(self, prompt: str, max_new_tokens: int | None = None) -> str:
        """One update call; a prompt too long for the model counts as unusable output (the fallbacks take over)."""
        try:
            return ask(self.model, render("update_system"), prompt, max_new_tokens or self.max_new_tokens)
        except InputError as exc:
            self.problems.append(str(exc))
            return ""

    def summarize(self, inp: UpdateInput) -> tuple[list[str], bool]:
        """(summary sentences, whether the model wrote them); the user's own words when it wrote none usable."""
        summary = parse_sentences(self._ask(render(
            "summarize", dialogue=format_dialogue(inp.dialogue), session_date=inp.session_date.isoformat(),
            max_sentences=10)), limit=15)
        return (summary, True) if summary else (extractive_summary(inp.dialogue)[:15], False)

    def reflect(self, inp: UpdateInput, summary: list[str]) -> list[str]:
        reflected = parse_sentences(self._ask(render(
            "reflect", dialogue=format_dialogue(inp.dialogue), summary="\n".join(summary))), limit=15)
        return reflected or summary

    def verify(self, inp: UpdateInput, memory: list[str]) -> str | None:
        """None when the new memory passes; otherwise the reason it failed."""
        if not memory:
            return "the update produced no usable sentence"
        budget = len(inp.previous) + 20
        if len(memory) > budget:
            return f"the update produced {len(memory)} sentences, more than {budget}"
        answer = self._ask(render("verify", previous=[s.text for s in inp.previous],
                                  dialogue=format_dialogue(inp.dialogue), memory=memory,
                                  session_date=inp.session_date.isoformat()), 96).strip()
        if answer.startswith("통과"):
            return None
        if answer.startswith("실패"):
            return answer[:200]
        return f"the verifier's answer was neither 통과 nor 실패: {answer[:80]!r}"

    def update(self, inp: UpdateInput, progress: Progress) -> UpdateResult:
        self.problems = []
        progress("summarizing")
        summary, generated_summary = self.summarize(inp)
        progress("reflecting")
        reflected = self.reflect(inp, summary) if generated_summary else summary
        details: dict[str, object] = {"summary": summary, "reflected": reflected, "attempts": [],
                                      "problems": self.problems}
        base = dict(model_spec=self.model.spec, prompt_hash=prompt_hash(*PROMPTS))
        user_turns = [t["text"] for t in inp.dialogue if t["role"] == "user"]
        dialogue = format_dialogue(inp.dialogue)
        if not generated_summary:
            progress("fallback")
            return UpdateResult(accumulate(inp.previous, reflected), "fallback",
                                note="the update model wrote no usable summary; kept the user's own words",
                                details=details, **base)
        if not inp.previous:
            progress("verifying")
            problem = self.verify(inp, reflected)
            details["attempts"] = [{"memory": reflected, "problem": problem}]
            sentences = [Sentence(t, "added") for t in reflected]
            return UpdateResult(sentences, "ok" if problem is None else "fallback", note=problem,
                                details=details, **base)
        problem = None
        for _ in range(self.attempts):
            progress("updating")
            generated = parse_sentences(self._ask(render(
                "update", previous=[s.text for s in inp.previous], summary=reflected,
                session_date=inp.session_date.isoformat(),
                previous_date=inp.previous_date.isoformat() if inp.previous_date else "알 수 없음",
                elapsed=elapsed_text(inp.previous_date, inp.session_date))))
            progress("verifying")
            judge = lambda sentence: self._ask(render("guard", sentence=sentence, dialogue=dialogue), 8)  # noqa: E731
            sentences, decisions = guard(inp.previous, generated, session_texts=user_turns + reflected,
                                         judge=judge, embedder=self.embedder) if generated else ([], [])
            problem = self.verify(inp, [s.text for s in sentences])
            details["attempts"].append({"memory": generated, "guard": decisions_json(decisions),  # type: ignore[union-attr]
                                        "problem": problem})
            if problem is None:
                return UpdateResult(sentences, "ok", details=details, **base)
        progress("fallback")
        return UpdateResult(accumulate(inp.previous, reflected), "fallback",
                            note=f"verification failed {self.attempts} times, kept previous memory + reflected summary: {problem}",
                            details=details, **base)
