"""Pairwise voting: an LLM judge picks the better of two strategies' replies, asked in both orders.

A comparison counts as a win only when the judge picks the same reply in both orders; disagreement between
the orders (position bias) or "비슷함" in either order is a tie; an answer naming neither reply is `invalid`.
Win rates use decisive comparisons, with Wilson 95% score intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from memory.prompts import prompt_hash, render
from memory.text import strip_wrappers
from models.base import ChatModel, GenerationOptions

PROMPT = "vote_judge"
Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n is 0."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def parse_vote(answer: str) -> str:
    """'1', '2', 'tie' (비슷함/같음) or 'invalid'."""
    text = answer.strip()
    for ch in text:
        if ch in "12":
            return ch
        if not ch.isspace() and ch not in "\"'응답:#*[(":
            break
    return "tie" if any(w in text for w in ("비슷", "같", "tie", "동일")) else "invalid"


class VoteJudge:
    def __init__(self, model: ChatModel, max_new_tokens: int = 16):
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.prompt_hash = prompt_hash(PROMPT)

    def __call__(self, context: str, first: str, second: str, reference: str = "") -> str:
        prompt = render(PROMPT, context=context, first=first, second=second, reference=reference or "(없음)")
        answer = self.model.complete(
            [{"role": "user", "content": prompt}],
            GenerationOptions(max_new_tokens=self.max_new_tokens, temperature=0.0),
        )
        return "invalid" if answer.cut else parse_vote(strip_wrappers(answer.text))  # a cut answer is no verdict


def compare(judge: Callable[..., str], context: str, reply_a: str, reply_b: str, reference: str = "") -> str:
    """'a', 'b', 'tie', or 'invalid' (an answer naming no reply): both orders must agree for a win."""
    forward = judge(context, reply_a, reply_b, reference)  # a is 1
    backward = judge(context, reply_b, reply_a, reference)  # a is 2
    if "invalid" in (forward, backward):
        return "invalid"
    if forward == "1" and backward == "2":
        return "a"
    if forward == "2" and backward == "1":
        return "b"
    return "tie"


@dataclass
class PairTally:
    a: str
    b: str
    wins_a: int = 0
    wins_b: int = 0
    ties: int = 0
    invalid: int = 0

    def add(self, outcome: str) -> None:
        if outcome == "a":
            self.wins_a += 1
        elif outcome == "b":
            self.wins_b += 1
        elif outcome == "invalid":
            self.invalid += 1
        else:
            self.ties += 1

    def as_json(self) -> dict:
        decisive = self.wins_a + self.wins_b
        rate = self.wins_a / decisive if decisive else None
        low, high = wilson(self.wins_a, decisive)
        return {
            "a": self.a,
            "b": self.b,
            "wins_a": self.wins_a,
            "wins_b": self.wins_b,
            "ties": self.ties,
            "invalid": self.invalid,
            "win_rate_a": rate,
            "ci95_a": [low, high] if decisive else None,
            "share_a": self.wins_a / (decisive + self.ties) if decisive + self.ties else None,
        }
