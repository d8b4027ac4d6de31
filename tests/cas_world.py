"""A gated update for the memory's compare-and-set: the model's answer and the versions it races."""

from __future__ import annotations

import threading
from typing import Any

from memory.engine import MemoryEngine
from memory.store import Sentence
from models.fake import stage_of

SEOUL, CAT, SWIM, JOB = (
    "사용자는 서울에 산다.",
    "사용자는 고양이 나비를 키운다.",
    "사용자는 주말마다 수영을 한다.",
    "사용자는 은행에서 일한다.",
)


NEWS = "사용자는 제주도 여행을 계획하고 있다."


def _v1(engine: MemoryEngine, uid: int):
    return engine.commit(
        uid, [Sentence(t) for t in (SEOUL, CAT, SWIM, JOB)], base=None, strategy="import", status="ok", author="import"
    )


class Gate:
    """Blocks the update model's first call until the test lets it go, so a test can act while an update runs."""

    def __init__(self, parties: int = 1):
        self.entered = threading.Barrier(parties + 1)
        self.release = threading.Event()
        self.calls = 0
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            self.calls += 1
            first = self.calls <= self.entered.parties - 1
        if first:
            self.entered.wait(timeout=20)
            assert self.release.wait(timeout=20), "the test never released the update"


def updater_answer(gate: Gate):
    """The update model: every stage waits at the gate first; the update stage keeps every previous sentence
    verbatim (the deleted one too) and adds the session's news."""

    def answer(messages: list[dict[str, Any]]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage == "summarize":
            gate.wait()
            return NEWS
        if stage == "reflect":
            return NEWS
        if stage == "update":
            previous = prompt.rsplit("\n이전 기억:\n", 1)[-1].split("\n이번 요약", 1)[0]
            kept = [line.lstrip("-0123456789. ").strip() for line in previous.splitlines() if "사용자는" in line]
            return "\n".join([*kept, NEWS])
        if stage in ("verify",):
            return "통과"
        if stage == "guard":
            return "아니오"
        return "네, 알겠어요."

    return answer
