"""Perplexity of a probe (fifth) session's reference responses given a memory, and the replies for voting.

The memory goes into the app's own system prompt (memory/prompts/chat_system.txt); each probe turn is scored
as the assistant's reply after the system prompt and the probe dialogue before it. Perplexity is
token-weighted over all probe turns of a strategy: exp(-sum logprob / sum tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from memory.prompts import chat_system_prompt
from models.base import ChatModel, GenerationOptions, Message, Role


@dataclass(frozen=True)
class ProbeTurn:
    """One reference response to score: the dialogue before it and the reference reply."""

    history: tuple[tuple[Role, str], ...]  # (role, text) turns before the reply
    reference: str


def probe_turns(dialogue: Sequence[dict], only_marked: bool = True) -> list[ProbeTurn]:
    """The assistant turns to score: those marked `probe: true`, or every assistant turn when none is marked."""
    marked = any(t.get("probe") for t in dialogue)
    out = []
    for i, t in enumerate(dialogue):
        if t["role"] == "assistant" and (t.get("probe") or not (marked and only_marked)):
            out.append(ProbeTurn(tuple((d["role"], d["text"]) for d in dialogue[:i]), t["text"]))
    return out


def messages_for(turn: ProbeTurn, memory: Sequence[str], today: date, previous_date: date | None) -> list[Message]:
    msgs: list[Message] = [{"role": "system", "content": chat_system_prompt(list(memory), today, previous_date)}]
    msgs += [{"role": role, "content": text} for role, text in turn.history]
    return msgs


@dataclass
class PerplexityTotal:
    logprob: float = 0.0
    n_tokens: int = 0
    turns: int = 0

    @property
    def perplexity(self) -> float | None:
        return math.exp(-self.logprob / self.n_tokens) if self.n_tokens else None

    def as_json(self) -> dict:
        return {"logprob": self.logprob, "n_tokens": self.n_tokens, "turns": self.turns, "perplexity": self.perplexity}


def score_turns(
    model: ChatModel,
    turns: Sequence[ProbeTurn],
    memory: Sequence[str],
    today: date,
    previous_date: date | None,
    total: PerplexityTotal | None = None,
) -> PerplexityTotal:
    """Add the log-probabilities of each turn's reference reply under `model` to `total`."""
    total = total or PerplexityTotal()
    for turn in turns:
        s = model.score(messages_for(turn, memory, today, previous_date), turn.reference)
        total.logprob += s.logprob
        total.n_tokens += s.n_tokens
        total.turns += 1
    return total


def reply(
    model: ChatModel,
    turn: ProbeTurn,
    memory: Sequence[str],
    today: date,
    previous_date: date | None,
    max_new_tokens: int = 128,
) -> str:
    """The model's own reply at a probe turn (greedy), for pairwise voting."""
    return model.complete(
        messages_for(turn, memory, today, previous_date),
        GenerationOptions(max_new_tokens=max_new_tokens, temperature=0.0),
    ).text.strip()
