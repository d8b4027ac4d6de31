"""A user's sessions and memory versions with known origins, shared by the provenance, why and
screenshot code."""

from __future__ import annotations

import re

from memory.store import Store
from models.fake import stage_of

SEOUL, CAT, SMOKE, PEANUT = (
    "사용자는 서울 마포구에 산다.",
    "사용자는 고양이 나비를 키운다.",
    "사용자는 담배를 피운다.",
    "사용자는 땅콩 알레르기가 있다.",
)


MOVED, QUIT, PIANO = (
    "사용자는 서울 마포구에 살다가 부산으로 이사했다.",
    "사용자는 금연을 시작했다.",
    "사용자는 요즘 피아노를 배운다.",
)


BUSAN = "사용자는 부산으로 이사했다."


PHONE = "010-2741-9386"


SESSION1 = [
    "나 서울 마포구에 살아.",
    "고양이 나비를 키우고 있어.",
    "아직 담배를 피워.",
    "땅콩 알레르기가 있어서 조심해.",
]


SESSION2 = [
    "지난주에 부산으로 이사했어!",
    "그리고 금연 시작했어.",
    f"요즘 피아노를 배우기 시작했어. 학원 번호는 {PHONE}이야.",
]


SUMMARIES = {SESSION1[0]: [SEOUL, CAT, SMOKE, PEANUT], SESSION2[0]: [BUSAN, QUIT, PIANO]}


def _section(prompt: str, head: str, end: str) -> list[str]:
    start = prompt.rfind(head)
    rest = prompt[start + len(head) :] if start >= 0 else ""
    return [line.strip() for line in rest.split(end, 1)[0].splitlines() if line.strip()]


def world(messages: list[dict[str, str]]) -> str:
    """The update model of both sessions: their summaries; session 2's rewrite moves the home, adds the piano and
    quitting, and leaves out smoking (justified: the judge says 예) and the peanut allergy (no reason: restored)."""
    prompt = messages[-1]["content"]
    stage = stage_of(prompt)
    if stage in ("summarize", "reflect"):
        return "\n".join(next(v for k, v in SUMMARIES.items() if k in prompt))
    if stage == "update":
        return "\n".join([MOVED, CAT, QUIT, PIANO])
    if stage == "guard":
        pairs = [re.match(r"\d+\. A: (.*) / B: (.*)", line) for line in _section(prompt, "\n질문:", "답:")]
        return "\n".join(f"{n}: {'예' if m and m.group(1) == SMOKE else '아니오'}" for n, m in enumerate(pairs, 1))
    if stage == "verify":
        return "통과"
    return "네, 알겠어요."


def session(store: Store, uid: int, turns: list[str], strategy: str = "keem") -> int:
    sid = store.sessions.start(uid, strategy, "fake")
    for text in turns:
        store.turns.add(sid, uid, "user", text)
        store.turns.add(sid, uid, "assistant", "그렇군요.")
    store.sessions.end(sid)
    return store.queue.enqueue(uid, sid, strategy)
