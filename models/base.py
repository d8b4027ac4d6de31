"""The chat-model protocol every backend implements, and the message type they share."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, TypedDict

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


@dataclass(frozen=True)
class Finish:
    """Why a generation stopped, and what it cost: what a backend's `stream` generator returns when it is done.

    `reason` is "stop" (the model ended its answer) or "length" (it ran into `max_new_tokens`: the answer is cut).
    Token counts are None where the backend does not report them; `cached_tokens` counts the prompt tokens a
    prefix cache served (our KV reuse in models/hf.py, a server's prompt cache).
    """

    reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens a cache served (not computed again), where the backend says


@dataclass(frozen=True)
class Completion:
    """A whole answer and why it ended. A cut answer (`cut`) is unusable for memory, data or verdicts."""

    text: str
    finish: Finish = Finish()

    @property
    def cut(self) -> bool:
        return self.finish.reason == "length"


ChatStream = Generator[str, None, "Finish | None"]


def finish_reason(reason: str | None, completion_tokens: int | None, max_new_tokens: int) -> str:
    """A server's finish reason in our two words. A reply that used its whole budget counts as cut whatever the
    server says: older Ollama answers "stop" for a reply cut at max_tokens, some servers give no reason at all."""
    if reason in ("length", "max_tokens", "max_length"):
        return "length"
    if completion_tokens is not None and completion_tokens >= max_new_tokens:
        return "length"
    return "stop"


BROKEN = "\ufffd"  # what a decoder writes for the bytes of a character it did not get whole


def whole_characters(pieces: Iterable[str]) -> Iterator[str]:
    """The pieces of a streamed reply, never ending in a broken character: a trailing U+FFFD (the first bytes of a
    character whose rest the token limit cut off) is held back until text follows it, and dropped if none does."""
    held = ""
    for piece in pieces:
        text = held + piece
        body = text.rstrip(BROKEN)
        held = text[len(body) :]
        if body:
            yield body


def drain(stream: ChatStream) -> Completion:
    """Read a stream to its end: the joined text and the backend's Finish (a plain "stop" if it returned none)."""
    parts: list[str] = []
    while True:
        try:
            parts.append(next(stream))
        except StopIteration as done:
            return Completion("".join(parts), done.value or Finish())


class ChatModel:
    """A chat model: `stream` is the one required method; `complete` and `score` build on it or override it.

    `stream` is a generator of text pieces that returns a `Finish` (why it stopped, token usage) when done;
    `complete` returns the whole `Completion`. Backends set `spec` (the string that built them) and
    `context_window` (tokens).
    """

    spec: str = "unknown"
    context_window: int = 4096
    description: str = ""
    # Why, for a model that never ends an answer on its own (the offline demo): every answer would be cut at its
    # budget and so unusable (docs/design.md), and the memory-update steps do not ask it. Empty for real models.
    runs_to_budget: str = ""
    found_on: str = ""  # the local server `auto` found it on ("Ollama", "vLLM", ...: models/local.py); else empty

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        raise NotImplementedError

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        return drain(self.stream(messages, options))

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
