"""The operation baseline: each of PASS / APPEND / REPLACE / DELETE decided by the model and applied."""

from __future__ import annotations

from datetime import date

import pytest

from memory.store import Sentence
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput
from memory.updaters.operations import apply_operation, parse_operation
from models.fake import ScriptedChatModel

PREVIOUS = [
    Sentence("사용자는 서울에 산다.", id=1),
    Sentence("사용자는 감기에 걸렸다.", id=2),
    Sentence("사용자는 고양이를 키운다.", id=3),
]


def _run(summary: str, answers: list[str], previous=PREVIOUS):
    model = ScriptedChatModel([summary, *answers])
    inp = UpdateInput(
        previous=list(previous), dialogue=[{"role": "user", "text": "이사했어"}], session_date=date(2024, 5, 1)
    )
    return make_updater("operations", model).update(inp, lambda stage: None), model


def test_each_operation_is_applied_in_order():
    summary = (
        "사용자는 부산으로 이사했다.\n사용자는 감기가 다 나았다.\n사용자는 고양이를 키운다.\n사용자는 요가를 시작했다."
    )
    result, model = _run(summary, ["REPLACE 1", "DELETE 2", "PASS", "APPEND"])
    assert [(s.text, s.provenance, s.origin_id) for s in result.sentences] == [
        ("사용자는 부산으로 이사했다.", "rewritten", 1),
        ("사용자는 고양이를 키운다.", "kept", 3),
        ("사용자는 요가를 시작했다.", "added", None),
    ]
    assert [o["operation"] for o in result.details["operations"]] == ["REPLACE", "DELETE", "PASS", "APPEND"]
    assert len(model.calls) == 7  # 1 summarize + one per summary sentence + the emotion records (failed, tried twice)
    # Numbers refer to the memory as it stands when each sentence is decided.
    assert "1. 사용자는 부산으로 이사했다." in model.calls[2][-1]["content"]


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("REPLACE 2", ("REPLACE", 1)),
        ("delete 1.", ("DELETE", 0)),
        ("PASS", ("PASS", None)),
        ("APPEND", ("APPEND", None)),
        ("REPLACE 9", ("APPEND", None)),
        ("REPLACE", ("APPEND", None)),
        ("잘 모르겠어요", ("APPEND", None)),
    ],
)
def test_unparseable_or_out_of_range_answers_append_so_nothing_new_is_lost(answer, expected):
    assert parse_operation(answer, size=3) == expected


def test_first_session_appends_without_asking():
    result, model = _run("사용자는 학생이다.\n사용자는 축구를 좋아한다.", [], previous=[])
    assert [s.text for s in result.sentences] == ["사용자는 학생이다.", "사용자는 축구를 좋아한다."]
    assert len(model.calls) == 3  # the summary, then the emotion records (nothing queued: fails, tried twice)


def test_deleting_everything_still_leaves_a_nonempty_memory():
    result, _ = _run(
        "사용자는 감기가 나았다.",
        ["DELETE 1", "DELETE 1", "DELETE 1"],
        previous=[Sentence("사용자는 감기에 걸렸다.", id=1)],
    )
    assert [s.text for s in result.sentences] == ["사용자는 감기가 나았다."]


def test_apply_operation_does_not_mutate_its_input():
    memory = list(PREVIOUS)
    apply_operation(memory, "사용자는 x다.", "DELETE", 0)
    assert memory == PREVIOUS


def test_wrapped_answers_are_read_and_appending_what_is_stored_adds_no_copy():
    assert parse_operation("<think>음</think>\n네, 답입니다:\nREPLACE 2", size=3) == ("REPLACE", 1)
    memory = [Sentence("사용자는 학생이다.", "kept", id=1)]
    assert apply_operation(memory, "사용자는 학생이다.", "APPEND", None) == memory
