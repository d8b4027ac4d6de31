"""`keem build-dataset --dry-run`: the build itself, against a model that calls nothing.

`estimate` runs the real build (evaluation/builder.py's DatasetBuilder and EpisodeRunner over the shared steps of
memory/updaters/steps.py: the same prompts, budgets, ceiling, scope windows, guard and cut-answer retries) in a
throwaway folder, against `EstimatingModel`, which answers every stage with a plausible answer of a plausible size
read from its prompt and counts the calls and tokens of each stage. So the dry run counts what a build calls, and
only that; --out is never touched (no cache row, no dataset row, no lock, no run.json a later build would resume).
"""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evaluation.builder import BuildConfig, build_dataset
from evaluation.corpora.episodes import Episode
from memory.updaters.relatedness import evidence
from memory.updaters.steps import DEFAULT_CEILING, SUMMARY_SENTENCES
from models.base import ChatModel, ChatStream, Finish, GenerationOptions, Message, estimate_tokens
from models.fake import cut_to_budget, section, stage_of

SUMMARY_CHARS = 40  # a written summary sentence: the user's turn, this long at most
# The emotion clauses reflect adds, one per sentence in turn (a summary sentence then takes ~1.3x its tokens): one
# content word each and no attribute, so a feeling adds little to what the guard and the scope compare.
FEELINGS = ("고 해서 기뻐했다", "고 해서 걱정했다", "고 해서 아쉬워했다", "고 해서 설렌다고 했다")
# in the summary's language: an English corpus's (MSC, LoCoMo) memory stays English, as a real model writes it
FEELINGS_EN = (", and was glad", ", and was worried", ", and felt sorry", ", and was excited")
HANGUL = re.compile(r"[\uac00-\ud7a3]")
ORDER = ("summarize", "reflect", "scope", "update", "guard", "verify")  # the stages in the order a step calls them
_QUESTION = re.compile(r"^(\d+)\. A: ")


@dataclass
class StageCount:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EstimatingModel(ChatModel):
    """Answers each update stage as a model that does its job would, at that answer's size, and calls nothing.

    summarize: one sentence per user turn (at most SUMMARY_SENTENCES, SUMMARY_CHARS each); reflect: every summary
    sentence with an emotion clause; update: the previous memory and the summary, less each previous sentence a
    summary sentence speaks to by the same attribute of the user's life (the guard's table,
    memory/updaters/relatedness.py), claimed as replaced after "바뀐 문장:" (else "바뀐 문장: 없음"); judge: 예 to
    every pair; verify: 통과; scope: 번호: 없음 (the table then scopes). Answers are cut at the call's budget as a
    real backend's are, so the steps' retries are counted too. `stages` holds each stage's calls and tokens.
    """

    def __init__(self, context_window: int = 8192):
        self.spec = "dry-run"
        self.context_window = context_window
        self.description = "estimating model (keem build-dataset --dry-run): calls nothing"
        self.stages: dict[str, StageCount] = {}
        self.lock = threading.Lock()

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        prompt = messages[-1]["content"] if messages else ""
        stage = stage_of(prompt) or "other"
        text, reason = cut_to_budget(self.answer(stage, prompt), options.max_new_tokens)
        finish = Finish(reason, sum(estimate_tokens(m["content"]) for m in messages), estimate_tokens(text))
        with self.lock:
            count = self.stages.setdefault(stage, StageCount())
            count.calls += 1
            count.prompt_tokens += finish.prompt_tokens or 0
            count.completion_tokens += finish.completion_tokens or 0
        yield text
        return finish

    def answer(self, stage: str, prompt: str) -> str:
        """The answer a model doing its job would give to this stage's prompt (memory/prompts/<stage>.txt)."""
        if stage == "summarize":
            dialogue = prompt.rsplit("\n대화 (", 1)[-1].split("\n", 1)[-1].rsplit("\n요약:", 1)[0]
            said = [line[4:].strip() for line in dialogue.splitlines() if line.startswith("사용자: ")]
            return "\n".join(f"사용자는 {text[:SUMMARY_CHARS]}라고 했다." for text in said[:SUMMARY_SENTENCES])
        if stage == "reflect":
            summary = section(prompt, "\n요약:\n", "\n답:")
            return "\n".join(
                line.rstrip(".") + (FEELINGS if HANGUL.search(line) else FEELINGS_EN)[n % len(FEELINGS)] + "."
                for n, line in enumerate(summary)
            )
        if stage == "update":
            previous = section(prompt, "\n이전 기억:\n", "\n이번 요약:")
            summary = section(prompt, "\n이번 요약:\n", "\n새 기억:")
            replaced = {old: new for old in previous if (new := self.replacing(old, summary)) is not None}
            claims = [f"{old} => {new}" for old, new in replaced.items()]
            memory = [line for line in previous if line not in replaced] + summary
            return "\n".join([*memory, "바뀐 문장:" if claims else "바뀐 문장: 없음", *claims])
        if stage == "guard":
            questions = [_QUESTION.match(line) for line in section(prompt, "\n질문:\n", "\n답:")]
            return "\n".join(f"{m.group(1)}: 예" for m in questions if m)
        if stage == "verify":
            return "통과"
        if stage == "scope":
            return "번호: 없음"
        return "없음"  # a stage the build does not run today (emotions, cues): one short line

    @staticmethod
    def replacing(old: str, summary: list[str]) -> str | None:
        """The summary sentence that replaces `old`: the one with the most evidence among those speaking to the same
        attribute of the user's life (where they live, their work, their health, ...), or None."""
        found = [(e.strength, new) for new in summary if (e := evidence(old, new)) is not None and e.attributes]
        return max(found, key=lambda pair: pair[0])[1] if found else None


@dataclass
class Estimate:
    episodes: int
    steps: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    stages: dict[str, StageCount] = field(default_factory=dict)  # per stage (summarize, reflect, update, ...)

    def cost(self, price_per_1k_tokens: float) -> float:
        return (self.prompt_tokens + self.completion_tokens) / 1000 * price_per_1k_tokens

    def json(self) -> dict[str, Any]:
        return asdict(self)


def estimate(
    episodes: Iterable[Episode],
    limit: int | None = None,
    *,
    guard: bool = True,
    ceiling: int = DEFAULT_CEILING,
    progress: bool = False,
) -> Estimate:
    """Calls and tokens a build of these episodes (the first `limit`) makes before any cache: the build run in a
    throwaway folder against `EstimatingModel`; no model is called and nothing is written anywhere else."""
    model = EstimatingModel()
    with tempfile.TemporaryDirectory(prefix="keem-dry-run-") as scratch:
        config = BuildConfig(
            out_dir=Path(scratch), concurrency=1, limit=limit, progress=progress, guard=guard, ceiling=ceiling
        )
        stats = build_dataset(episodes, model, config)
    rank = {stage: n for n, stage in enumerate(ORDER)}
    stages = dict(sorted(model.stages.items(), key=lambda item: (rank.get(item[0], len(ORDER)), item[0])))
    return Estimate(
        stats.episodes,
        stats.steps,
        sum(s.calls for s in stages.values()),
        sum(s.prompt_tokens for s in stages.values()),
        sum(s.completion_tokens for s in stages.values()),
        stages,
    )
