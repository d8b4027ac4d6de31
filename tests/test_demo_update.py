"""A model that never ends its answers (the offline demo) is not asked by the update steps: no minutes spent on
answers that would be cut and thrown away; the version is the never-lose fallback, and its note says why."""

from __future__ import annotations

from datetime import date

import pytest

from memory.store import Sentence
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput
from models.demo import RUNS_TO_BUDGET
from models.fake import ScriptedChatModel


@pytest.mark.parametrize("strategy", ["keem", "accumulate", "operations"])
def test_a_model_that_runs_to_its_budget_is_not_asked_and_the_note_says_why(strategy):
    model = ScriptedChatModel(responder=lambda msgs: "이 답은 쓰이지 않아야 한다")
    model.runs_to_budget = RUNS_TO_BUDGET
    inp = UpdateInput(
        previous=[Sentence("사용자는 고양이를 키운다.")],
        dialogue=[
            {"role": "user", "text": "나 지난주에 테니스 치다가 손목을 다쳤어."},
            {"role": "assistant", "text": "괜찮아?"},
        ],
        session_date=date(2026, 12, 1),
    )
    stages: list[str] = []
    result = make_updater(strategy, model).update(inp, stages.append)
    assert model.calls == []  # not one call
    texts = [s.text for s in result.sentences]
    assert "사용자는 고양이를 키운다." in texts and any("손목" in t for t in texts)  # nothing lost, the news kept
    assert result.status == "fallback" and result.notes[0].code == "no_summary"
    problems = " ".join(result.notes[0].params["problems"])
    assert "not asked" in problems and "SmolLM2" in problems
    if strategy != "accumulate":  # the page's history names the reason: the model was not asked (chatbot/web/history)
        assert result.details["fallback"] == "not_asked"
