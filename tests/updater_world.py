"""The updater's staged answers: a previous memory, a session, a model answering each step."""

from __future__ import annotations

from datetime import date

from memory.store import Sentence
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel, stage_of


class StageModel(ScriptedChatModel):
    """Answers by prompt stage; each stage's answers are used in order, the last one repeating."""

    def __init__(self, **answers):
        self.answers = {k: list(v) if isinstance(v, list) else [v] for k, v in answers.items()}
        self.answers.setdefault("emotions", ["없음"])  # the records step, unless a test scripts it
        self.answers.setdefault("scope", ["번호: 없음"])  # the scope call names nothing, unless a test scripts it
        self.asked: list[str] = []
        super().__init__(responder=self._answer)

    def _answer(self, messages):
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        self.asked.append(stage)
        queue = self.answers[stage]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


PREVIOUS = ["사용자는 서울에 산다.", "사용자는 고양이 한 마리를 키운다.", "사용자는 지난달 코로나에 걸려 고생했다."]


DIALOGUE = [
    {"role": "user", "text": "나 지난주에 서울 떠나서 부산으로 이사했어! 바다가 보여서 너무 좋아."},
    {"role": "assistant", "text": "와, 축하해!"},
]


def _input(previous=PREVIOUS):
    return UpdateInput(
        previous=[Sentence(t, "kept", id=i + 1) for i, t in enumerate(previous)],
        dialogue=DIALOGUE,
        session_date=date(2024, 5, 20),
        previous_date=date(2024, 4, 1),
    )


def _run(model, inp=None):
    stages = []
    result = make_updater("keem", model, NgramEmbedder()).update(inp or _input(), stages.append)
    return result, stages


GOOD = StageModel(
    summarize="사용자는 지난주에 부산으로 이사했다.\n사용자는 바다가 보이는 집을 좋아한다.",
    reflect="- 사용자는 지난주에 부산으로 이사했다.\n- 사용자는 바다가 보여서 새 집에 만족하고 기뻐한다.",
    update="1. 사용자는 서울에 살다가 2024년 5월에 부산으로 이사했다.\n2. 사용자는 고양이 한 마리를 키운다.\n"
    "3. 사용자는 지난달 코로나에 걸려 고생했다.\n4. 사용자는 바다가 보여서 새 집에 만족하고 기뻐한다.",
    verify="통과",
    guard="예",
)
