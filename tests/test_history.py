"""The memory tab's history names each version in plain Korean with the real reason (chatbot/web/history.py): a
safe-mode version says whether the summary was unusable or the new memory failed verification, as its updater
recorded; no internal codes, English notes or, in a blind trial, strategy names."""

from __future__ import annotations

from chatbot.localtime import KOREA, local_time
from chatbot.web.messages import LABELS
from chatbot.web.render import md
from chatbot.web.why import render_versions
from memory.changelog import changelogs
from memory.engine import MemoryEngine
from memory.store import Sentence, note
from tests.updater_world import GOOD, PREVIOUS, StageModel, _run


def _history(engine: MemoryEngine, result, show_strategy: bool = True) -> str:
    user_id = engine.store.users.get_or_create("민수")
    base = engine.commit(
        user_id, [Sentence(t) for t in PREVIOUS], base=None, strategy="user", status="ok", author="import"
    )
    engine.commit(
        user_id,
        result.sentences,
        base=base.number,
        strategy="keem",
        status=result.status,
        author="updater",
        notes=result.notes,
        details=result.details,
    )
    edited = engine.current(user_id)
    engine.commit(
        user_id,
        [*edited.sentences, Sentence("사용자는 수영을 배운다.", "user")],
        base=edited.number,
        strategy="user",
        status="ok",
        author="user",
        notes=[note("added")],
    )
    versions = engine.store.versions.of_user(user_id)  # as "버전 기록" shows them, each with its changelog
    return render_versions(
        versions, changelogs(engine.store, versions), show_strategy=show_strategy, local=local_time(KOREA)
    )


def test_a_cut_summary_is_named_as_such_not_as_a_failed_verification(engine):
    cut = StageModel(summarize="사용자는 " + "아주 " * 3000 + "길게 말했다.", reflect="x", update="x", verify="통과")
    result, _ = _run(cut)
    assert result.status == "fallback" and result.notes[0].code == "no_summary"
    shown = _history(engine, result, show_strategy=False)
    assert md(LABELS["no_summary"]) in shown and md(LABELS["not_verified"]) not in shown
    assert LABELS["updater_fallback"] in shown and LABELS["import"] in shown and LABELS["user"] in shown
    assert "사용자가 문장을 추가했습니다" in shown  # the user's own edit keeps its (Korean) note
    for internal in ("keem", "fallback", "/ok", "no usable summary", "answer cut", "user/"):
        assert internal not in shown, internal


def test_a_failed_verification_is_named_and_an_operator_sees_the_strategy(engine):
    model = StageModel(**{**GOOD.answers, "verify": "실패: 모순이 있다"})
    result, _ = _run(model)
    assert result.status == "fallback" and result.details["fallback"] == "not_verified"
    shown = _history(engine, result)
    assert md(LABELS["not_verified"]) in shown and md(LABELS["no_summary"]) not in shown
    assert "keem 방식" in shown and "keem/fallback" not in shown and "verification failed" not in shown
