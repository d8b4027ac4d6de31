"""A scripted chat model we own, for tests and dry runs: replies come from a queue or a function."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterator

from models.base import ChatModel, ContinuationScore, GenerationOptions, Message
from models.errors import GenerationError

Reply = str | BaseException
Responder = Callable[[list[Message]], str]


class ScriptedChatModel(ChatModel):
    """Answers each call with the next queued reply (an exception in the queue is raised), else `responder`.

    Every call's messages are kept in `calls`, so a test can assert what the model was asked.
    """

    def __init__(self, replies: list[Reply] | None = None, responder: Responder | None = None,
                 spec: str = "fake", context_window: int = 8192):
        self.queue: deque[Reply] = deque(replies or [])
        self.responder = responder
        self.calls: list[list[Message]] = []
        self.options: list[GenerationOptions] = []
        self.spec = spec
        self.context_window = context_window
        self.description = "scripted fake model (tests)"

    def enqueue(self, *replies: Reply) -> "ScriptedChatModel":
        self.queue.extend(replies)
        return self

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Iterator[str]:
        self.calls.append([dict(m) for m in messages])  # type: ignore[misc]
        self.options.append(options)
        if self.queue:
            reply = self.queue.popleft()
        elif self.responder is not None:
            reply = self.responder(messages)
        else:
            raise GenerationError("scripted model has no reply queued; enqueue() one in the test")
        if isinstance(reply, BaseException):
            raise reply
        # Stream in small pieces, as real backends do.
        for i in range(0, len(reply), 4):
            yield reply[i:i + 4]

    def score(self, context: list[Message], continuation: str) -> ContinuationScore:
        return ContinuationScore(logprob=-float(len(continuation)), n_tokens=max(len(continuation), 1))
