"""The chat-model protocol every backend implements, and the message type they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, TypedDict

from models.errors import NotSupportedError

Role = Literal["system", "user", "assistant"]


class Message(TypedDict):
    role: Role
    content: str


@dataclass(frozen=True)
class GenerationOptions:
    """Sampling settings; temperature 0 means greedy (deterministic), as memory updates use."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    timeout_s: float = 120.0


@dataclass(frozen=True)
class ContinuationScore:
    """Log-probability of a continuation given a context: the input of perplexity."""

    logprob: float
    n_tokens: int

    @property
    def perplexity(self) -> float:
        import math

        return math.exp(-self.logprob / max(self.n_tokens, 1))


class ChatModel:
    """A chat model: `stream` is the one required method; `complete` and `score` build on it or override it.

    Backends set `spec` (the string that built them) and `context_window` (tokens).
    """

    spec: str = "unknown"
    context_window: int = 4096
    description: str = ""

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Iterator[str]:
        raise NotImplementedError

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> str:
        return "".join(self.stream(messages, options))

    def score(self, context: list[Message], continuation: str) -> ContinuationScore:
        """Log-probability of `continuation` as the assistant's reply after `context`."""
        raise NotSupportedError(
            f"model '{self.spec}' cannot score continuations; use an hf:<id|path> model for perplexity"
        )

    def count_tokens(self, text: str) -> int:
        """Token count; backends without a tokenizer use a conservative estimate (Hangul is ~1 token per char)."""
        return estimate_tokens(text)


def estimate_tokens(text: str) -> int:
    """A conservative token estimate without a tokenizer: one per Hangul/CJK char, one per 3 other chars."""
    wide = sum(1 for ch in text if ord(ch) >= 0x1100)
    return wide + (len(text) - wide + 2) // 3
