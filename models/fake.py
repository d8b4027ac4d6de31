"""Chat models we own, for tests, benchmarks and dry runs.

`ScriptedChatModel` answers exactly what a test queued (for exact-answer tests). `RealisticChatModel` answers
what a responder says, with the bad habits real models have: it stops at `max_new_tokens` (finish reason
"length"), wraps answers (a <think> block, a preamble, code fences, numbering, bullets, an English line, a
repeated line), silently drops a sentence it was asked to copy, words verdicts in free text, and fails with
429s and timeouts. Both honour the token budget as real backends do: nothing here answers past it; and both
refuse a prompt longer than their `context_window` (ContextOverflowError, as models/openai_backend.py turns a
server's 400).
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Callable, Generator

from models.base import ChatModel, ChatStream, ContinuationScore, Finish, GenerationOptions, Message, estimate_tokens
from models.errors import ContextOverflowError, GenerationError

Reply = str | BaseException
# Which update step a prompt is (memory/prompts/<step>.txt holds each marker), for fakes that answer by step
STAGE_MARKERS = {
    "operations": "PASS: 새 문장의 내용이",
    "summarize": "요약으로 정리하세요",
    "reflect": "감정과 그 감정의 원인",
    "update": "새 기억으로 통합",
    "verify": "새 기억이 올바른지",
    "guard": "새 기억에서 빠졌습니다",
    "guard_both": "지금 둘 다 사실일 수 있는지",
    "scope": "바꾸거나 끝냈을 수 있는 기억 문장의 번호",
    "cues": "쓸 만한 낱말을 문장마다 적으세요",
    "emotions": "감정과 그 원인을 기록하세요",
    "rerank": "도움이 되는 순서대로 문장 번호를",
}


def stage_of(prompt: str) -> str | None:
    """The update step whose prompt this is, or None (a chat turn, or another prompt)."""
    return next((stage for stage, marker in STAGE_MARKERS.items() if marker in prompt), None)


def section(prompt: str, head: str, end: str) -> list[str]:
    """The non-empty lines (stripped) between the last `head` of a rendered prompt and the next `end`, or [] when it
    has no `head`: how a fake reads its input out of a prompt (prompts start with few-shot examples, so the last)."""
    start = prompt.rfind(head)
    if start < 0:
        return []
    rest = prompt[start + len(head) :]
    return [line.strip() for line in rest.split(end, 1)[0].splitlines() if line.strip()]


Responder = Callable[[list[Message]], str]


def cut_to_budget(text: str, max_new_tokens: int) -> tuple[str, str]:
    """(the longest prefix of `text` within `max_new_tokens` estimated tokens, finish reason)."""
    if estimate_tokens(text) <= max_new_tokens:
        return text, "stop"
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits
        mid = (low + high + 1) // 2
        if estimate_tokens(text[:mid]) <= max_new_tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low], "length"


class _BudgetedModel(ChatModel):
    """Streams a reply in small pieces, cut at the budget, and returns its Finish with token counts."""

    def _emit(self, messages: list[Message], reply: str, options: GenerationOptions) -> Generator[str, None, Finish]:
        prompt = sum(estimate_tokens(m["content"]) for m in messages)
        if prompt > self.context_window:  # a server refuses it (400), a local model has no positions for it
            raise ContextOverflowError(
                f"the prompt ({prompt} tokens) does not fit the fake's {self.context_window}-token context; "
                "give it a larger context_window, or send less"
            )
        text, reason = cut_to_budget(reply, options.max_new_tokens)
        for i in range(0, len(text), 4):  # small pieces, as real backends stream
            yield text[i : i + 4]
        return Finish(reason, prompt, estimate_tokens(text))

    def score(self, context: list[Message], continuation: str) -> ContinuationScore:
        return ContinuationScore(logprob=-float(len(continuation)), n_tokens=max(len(continuation), 1))


class ScriptedChatModel(_BudgetedModel):
    """Answers each call with the next queued reply (an exception in the queue is raised), else `responder`.

    Every call's messages are kept in `calls`, so a test can assert what the model was asked.
    """

    def __init__(
        self,
        replies: list[Reply] | None = None,
        responder: Responder | None = None,
        spec: str = "fake",
        context_window: int = 8192,
    ):
        self.queue: deque[Reply] = deque(replies or [])
        self.responder = responder
        self.calls: list[list[Message]] = []
        self.options: list[GenerationOptions] = []
        self.spec = spec
        self.context_window = context_window
        self.description = "scripted fake model (tests)"

    def enqueue(self, *replies: Reply) -> ScriptedChatModel:
        self.queue.extend(replies)
        return self

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
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
        return (yield from self._emit(messages, reply, options))


# -- the realistic fake ---------------------------------------------------------------------------------
HABITS = (
    "think",
    "preamble",
    "fences",
    "numbering",
    "bullets",
    "english",
    "repeat",
    "drop",
    "stale",
    "unclaimed",
    "noclaims",
    "yes",
    "free_verdict",
    "fail",
)
_MEMORY_LINE = re.compile(r"^사용자")


class RealisticChatModel(_BudgetedModel):
    """A responder's ideal answers, spoiled the way real models spoil them; seeded, so runs repeat.

    `habits` maps a habit to the probability it strikes a call (see HABITS): `think`, `preamble`, `fences`,
    `english`, `repeat` wrap any answer; `numbering` and `bullets` mark the lines of a list; `drop` silently
    leaves out one line of a memory list that the prompt also holds (a fact the model was asked to copy: the
    paper's failure); `stale` copies back, unchanged, one line of the prompt's previous memory that the ideal
    answer left out (a model keeping an outdated fact beside its replacement); `unclaimed` leaves out one of the
    "A => B" lines a rewrite says it replaced (memory/updaters/claims.py); `noclaims` leaves out the whole
    "바뀐 문장:" section (small models often skip that part of the prompt); `yes` turns every "아니오" of a
    yes/no answer into "예" (a model that agrees with whatever it is asked); `free_verdict` words a
    "통과"/"실패" verdict in a sentence; `fail` raises a GenerationError like a 429 or a timeout that outlived
    the backend's retries. Every call is recorded in `calls` with its
    budget and finish reason, and `dropped` lists what `drop` left out.
    """

    def __init__(
        self,
        responder: Responder,
        habits: dict[str, float] | None = None,
        *,
        seed: int = 0,
        spec: str = "realistic-fake",
        context_window: int = 8192,
    ):
        unknown = set(habits or {}) - set(HABITS)
        if unknown:
            raise ValueError(f"unknown habits {sorted(unknown)}; choose from {', '.join(HABITS)}")
        self.responder = responder
        self.habits = dict(habits or {})
        self.rng = random.Random(seed)
        self.spec = spec
        self.context_window = context_window
        self.description = "realistic fake model (tests, benchmarks)"
        self.calls: list[dict[str, object]] = []
        self.dropped: list[str] = []

    @classmethod
    def all_habits(cls, responder: Responder, rate: float = 1.0, **kwargs: object) -> RealisticChatModel:
        """Every wrapping habit at `rate`, plus one drop per memory list; no failures (add `fail` for those)."""
        habits = {
            h: rate
            for h in HABITS
            if h not in ("fail", "numbering", "bullets", "stale", "unclaimed", "noclaims", "yes")
        }
        habits["numbering" if rate >= 1 else "bullets"] = rate
        return cls(responder, habits, **kwargs)  # type: ignore[arg-type]

    def _strikes(self, habit: str) -> bool:
        rate = self.habits.get(habit, 0.0)
        return rate > 0 and self.rng.random() < rate

    def spoil(self, answer: str, prompt: str) -> str:
        """The ideal answer as a real model might write it."""
        lines = answer.splitlines()
        memory = [i for i, line in enumerate(lines) if _MEMORY_LINE.match(line)]
        if len(memory) >= 3 and self._strikes("drop"):
            copied = [i for i in memory if lines[i] in prompt]
            if copied:
                victim = self.rng.choice(copied)
                self.dropped.append(lines[victim])
                del lines[victim]
        if memory and "\n이전 기억:" in prompt and self._strikes("stale"):
            shown = prompt.rsplit("\n이전 기억:", 1)[1].split("\n이번 요약:", 1)[0].splitlines()
            left_out = [
                line.strip() for line in shown if _MEMORY_LINE.match(line.strip()) and line.strip() not in lines
            ]
            if left_out:
                lines.insert(0, self.rng.choice(left_out))
        marker = next((i for i, line in enumerate(lines) if line.strip().startswith("바뀐 문장:")), None)
        if marker is not None and self._strikes("noclaims"):
            lines = lines[:marker]
        claims = [i for i, line in enumerate(lines) if " => " in line]
        if claims and self._strikes("unclaimed"):
            del lines[self.rng.choice(claims)]
        if any(re.search(r"(?:^|: )아니오$", line) for line in lines) and self._strikes("yes"):
            lines = [re.sub(r"((?:^|: ))아니오$", r"\1예", line) for line in lines]
        if answer.strip().startswith(("통과", "실패")) and self._strikes("free_verdict"):
            verdict = answer.strip()
            lines = [
                f"검토해 보니 새 기억에 문제가 없습니다. 결론: {verdict}"
                if verdict.startswith("통과")
                else f"아쉽지만 {verdict.replace('실패:', '실패입니다.', 1)}"
            ]
        if len(lines) > 1 and self._strikes("numbering"):
            lines = [f"{n}. {line}" for n, line in enumerate(lines, 1)]
        elif len(lines) > 1 and self._strikes("bullets"):
            lines = [f"- {line}" for line in lines]
        if lines and self._strikes("repeat"):
            lines.append(lines[self.rng.randrange(len(lines))])
        if self._strikes("english"):
            lines.insert(self.rng.randrange(len(lines) + 1), "Note: I kept every fact about the user.")
        if self._strikes("fences"):
            lines = ["```", *lines, "```"]
        if self._strikes("preamble"):
            lines.insert(0, "네, 요청하신 대로 정리했습니다:")
        if self._strikes("think"):
            lines = [
                "<think>",
                "사용자는 무엇을 말했는지 먼저 정리해 보자. 이전 기억과 비교해야 한다.",
                "</think>",
                *lines,
            ]
        return "\n".join(lines)

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        record: dict[str, object] = {"messages": [dict(m) for m in messages], "max_new_tokens": options.max_new_tokens}
        self.calls.append(record)
        if self._strikes("fail"):
            record["finish"] = "error"
            kind = self.rng.choice(["429 Too Many Requests", "timed out after 120 s"])
            raise GenerationError(f"injected failure: {kind}; the backend's retries ran out")
        prompt = messages[-1]["content"] if messages else ""
        reply = self.spoil(self.responder(messages), prompt)
        finish = yield from self._emit(messages, reply, options)
        record["finish"] = finish.reason
        record["prompt_tokens"], record["completion_tokens"] = finish.prompt_tokens, finish.completion_tokens
        return finish
