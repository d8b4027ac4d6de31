"""The KEEM updater, the deletion guard and the job runner, driven by a scripted model we own."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date

import pytest

from memory.dates import anchor
from memory.engine import MemoryEngine
from memory.jobs import Computed, JobRunner
from memory.store import Sentence
from memory.text import (
    elapsed_text,
    format_dialogue,
    lenient_sentences,
    parse_sentences,
    parse_verdict,
    parse_yes_no,
)
from memory.updaters import UpdateInput, make_updater
from memory.updaters.guard import guard
from memory.updaters.steps import Steps
from models.embedders import NgramEmbedder
from models.errors import ContextOverflowError, GenerationError
from tests.conftest import dead_owner
from tests.updater_world import DIALOGUE, GOOD, PREVIOUS, StageModel, _input, _run


def test_success_runs_the_four_stages_deterministically_with_dates_in_the_prompts():
    model = StageModel(**{k: list(v) for k, v in GOOD.answers.items()})
    result, stages = _run(model)
    assert stages == ["summarizing", "reflecting", "updating", "verifying"]
    # scope: two lines were kept word for word beside a new one; it names none of them, so no judge is asked
    assert model.asked == ["summarize", "reflect", "update", "scope", "verify", "emotions"]
    assert result.status == "ok" and result.prompt_hash and result.model_spec == "fake"
    assert result.sentences[0].text == "사용자는 서울에 살다가 2024년 5월에 부산으로 이사했다."
    assert result.sentences[0].provenance == "rewritten" and result.sentences[0].origin_id == 1
    assert [s.provenance for s in result.sentences[1:]] == ["kept", "kept", "added"]
    update_prompt = model.calls[2][-1]["content"]
    assert "2024-04-01" in update_prompt and "2024-05-20" in update_prompt and "7주" in update_prompt
    assert all(o.temperature == 0.0 and o.top_p == 1.0 for o in model.options)
    assert "후보" not in update_prompt  # no list of candidate emotions (the paper's ablation)


def test_failed_verification_retries_once_then_falls_back_to_accumulation():
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update=GOOD.answers["update"],
        verify="실패: 모순이 있다",
        guard="예",
    )
    result, stages = _run(model)
    assert model.asked.count("update") == 2 and model.asked.count("verify") == 2
    assert result.status == "fallback" and result.notes[0].code == "not_verified"
    assert "실패: 모순이 있다" in result.notes[0].params["problem"]
    texts = [s.text for s in result.sentences]
    assert texts[:3] == PREVIOUS and "사용자는 바다가 보여서 새 집에 만족하고 기뻐한다." in texts
    assert stages[-1] == "fallback"


def test_garbage_output_never_shrinks_the_memory():
    model = StageModel(
        summarize="Sure! Here is the summary:\nThe user moved.", reflect="x", update="...", verify="통과", guard="예"
    )
    result, _ = _run(model)
    texts = [s.text for s in result.sentences]
    assert result.status == "fallback" and texts[:3] == PREVIOUS
    assert any("부산으로 이사했어" in t for t in texts)  # the user's own words, not lost
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update="I cannot do that.",
        verify="통과",
        guard="예",
    )
    result, _ = _run(model)
    assert result.status == "fallback" and [s.text for s in result.sentences][:3] == PREVIOUS


def test_unparseable_verifier_answer_counts_as_a_failure():
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update=GOOD.answers["update"],
        verify="Looks good to me",
        guard="예",
    )
    assert _run(model)[0].status == "fallback"


# -- the deletion guard on fixture episodes ---------------------------------------------------------
def _guard(new, judge="예", previous=PREVIOUS):
    model = StageModel(guard=judge)
    sentences, decisions = guard(
        [Sentence(t, "kept", id=i + 1) for i, t in enumerate(previous)],
        new,
        session_texts=[t["text"] for t in DIALOGUE if t["role"] == "user"],
        judge=lambda pairs: Steps.for_model(model).judge(pairs, format_dialogue(DIALOGUE)),
    )
    return sentences, {d.sentence: d.action for d in decisions}, model


def test_guard_restores_an_unrelated_fact_and_a_finished_episode_without_asking():
    sentences, actions, model = _guard(["사용자는 2024년 5월에 부산으로 이사했다."])
    assert actions["사용자는 고양이 한 마리를 키운다."] == "restored"
    assert actions["사용자는 지난달 코로나에 걸려 고생했다."] == "restored"
    assert model.asked == ["guard"]  # only the related sentence (서울) is judged
    assert [s.text for s in sentences if s.provenance == "restored"] == PREVIOUS[1:]


def test_guard_accepts_a_drop_the_session_justifies():
    sentences, actions, model = _guard(["사용자는 2024년 5월에 부산으로 이사했다.", *PREVIOUS[1:]], judge="예")
    assert actions["사용자는 서울에 산다."] == "dropped" and model.asked == ["guard"]
    assert "사용자는 서울에 산다." not in [s.text for s in sentences]


def test_guard_restores_a_related_drop_the_model_does_not_justify():
    sentences, actions, _ = _guard(["사용자는 바다를 좋아한다.", *PREVIOUS[1:]], judge="아니오")
    assert actions["사용자는 서울에 산다."] == "restored"
    assert "사용자는 서울에 산다." in [s.text for s in sentences]


def test_guard_keeps_rewrites_as_counterparts():
    _, actions, model = _guard(["사용자는 서울에 살다가 부산으로 이사했다.", *PREVIOUS[1:]])
    assert actions["사용자는 서울에 산다."] == "rewritten" and model.asked == []


def test_a_sentence_missing_the_facts_noun_is_no_counterpart():
    """CareCall-style memory: two of three words shared, but the hospital is gone."""
    previous = ["병원에 방문할 예정", "두통이 있음"]
    sentences, actions, _ = _guard(
        ["아는 언니네 방문할 예정", "두통이 있었으나 괜찮아짐"], judge="아니오", previous=previous
    )
    assert actions == {"병원에 방문할 예정": "restored", "두통이 있음": "rewritten"}
    assert "병원에 방문할 예정" in [s.text for s in sentences]


def test_guard_runs_inside_the_updater_when_the_model_drops_facts():
    """A model that drops facts with no claim, names every sentence in its scope answer and agrees with every
    judge question: a scope that names the whole memory is no evidence against any one fact, so they stay."""
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update="사용자는 부산으로 이사했다.\n사용자는 바다를 좋아한다.",
        verify="통과",
        guard="예",
        scope="번호: 1, 2, 3",
    )
    result, _ = _run(model)
    texts = [s.text for s in result.sentences]
    assert "사용자는 고양이 한 마리를 키운다." in texts and "사용자는 지난달 코로나에 걸려 고생했다." in texts
    assert result.details["attempts"][0]["guard"]


def test_news_the_rewrite_left_out_is_kept():
    """The update model rewrites the old facts well but forgets this session's move: the summary line comes back."""
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update="\n".join(PREVIOUS),
        verify="통과",
        guard="아니오",
    )
    result, _ = _run(model)
    texts = [s.text for s in result.sentences]
    # the summary's "지난주" (said on 2024-05-20) is stored as the week it was
    assert texts[:3] == PREVIOUS and "사용자는 2024년 5월 셋째 주에 부산으로 이사했다." in texts
    assert result.details["attempts"][0]["summary_kept"] == [
        "사용자는 지난주에 부산으로 이사했다.",
        "사용자는 바다가 보여서 새 집에 만족하고 기뻐한다.",
    ]
    rewritten = StageModel(**{k: list(v) for k, v in GOOD.answers.items()})  # the news, with its date resolved
    assert _run(rewritten)[0].details["attempts"][0]["summary_kept"] == []


# -- the job runner: memory is never lost ----------------------------------------------------------
def _session(store, name="minsu"):
    uid = store.users.get_or_create(name)
    sid = store.sessions.start(uid, "keem", "fake")
    for t in DIALOGUE:
        store.turns.add(sid, uid, t["role"], t["text"])
    store.sessions.end(sid)
    return uid, sid, store.queue.enqueue(uid, sid, "keem")


def test_job_commits_a_version_and_records_stages(store):
    engine = MemoryEngine(store, NgramEmbedder())
    model = StageModel(**{k: list(v) for k, v in GOOD.answers.items()})
    uid, sid, job = _session(store)
    engine.commit(uid, [Sentence(t) for t in PREVIOUS], base=None, strategy="import", status="ok", author="import")
    seen = []
    version = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder)).run(job, seen.append)
    assert version.number == 2 and version.session_id == sid and version.status == "ok"
    assert store.queue.get(job)["status"] == "done" and store.queue.get(job)["version_id"] == version.id
    assert seen[-1] == "ok" and version.details["reflected"]


def test_exception_mid_update_leaves_memory_intact_and_the_job_retryable(store):
    engine = MemoryEngine(store, NgramEmbedder())
    uid, _sid, job = _session(store)
    engine.commit(uid, [Sentence(t) for t in PREVIOUS], base=None, strategy="import", status="ok", author="import")
    model = StageModel(
        summarize=GOOD.answers["summarize"],
        reflect=GOOD.answers["reflect"],
        update=GenerationError("server went away"),
        verify="통과",
        guard="예",
    )
    runner = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder))
    with pytest.raises(GenerationError):
        runner.run(job)
    assert store.versions.latest(uid).number == 1 and store.versions.latest(uid).texts == PREVIOUS
    assert store.queue.get(job)["status"] == "pending" and "server went away" in store.queue.get(job)["last_error"]
    model.answers["update"] = GOOD.answers["update"]
    assert runner.run(job).number == 2


def test_job_left_running_by_a_crash_is_resumed(store):
    engine = MemoryEngine(store, NgramEmbedder())
    _uid, _sid, job = _session(store)
    store.queue.claim(job, owner=dead_owner())  # the process died here, mid-job
    model = StageModel(**{k: list(v) for k, v in GOOD.answers.items()})
    runner = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder))
    assert runner.run() is None  # nothing pending until resumed
    assert runner.resume() == 1
    version = runner.run()
    assert version.number == 1 and version.texts and store.queue.get(job)["status"] == "done"


@pytest.mark.parametrize("then", ["stage", "fails", "commits"])
def test_a_copy_frozen_past_its_lease_wakes_to_a_taken_job_and_writes_nothing(store, then):
    """A worker frozen (SIGSTOP, a debugger) past its lease wakes after another worker took its job over. Whatever
    it does next (a stage, a failure, its commit), it writes nothing: the job stays the new owner's, running, with
    no error and no version; the old copy's run ends with None, not an exception."""
    engine = MemoryEngine(store, NgramEmbedder())
    _uid, _sid, job = _session(store)
    model = StageModel(**{k: list(v) for k, v in GOOD.answers.items()})
    runner = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder), lease_s=0.05)

    def frozen(strategy: str, inp: UpdateInput, stage: Callable[[str], None]) -> Computed:
        done = runner.compute(strategy, inp, lambda name: None)
        time.sleep(0.1)  # the lease runs out while it is frozen
        assert store.queue.claim(job, owner="other-host:7")["takeovers"] == 1
        if then == "stage":
            stage("cues")
        elif then == "fails":
            raise GenerationError("server went away")
        return done

    assert runner.run(job, compute=frozen) is None
    now = store.queue.get(job)
    assert (now["status"], now["owner"], now["stage"], now["last_error"]) == ("running", "other-host:7", "queued", None)
    assert store.versions.of_user(_uid) == []


def test_accumulate_strategy_appends_the_summary():
    model = StageModel(summarize=GOOD.answers["summarize"])
    result = make_updater("accumulate", model).update(_input(), lambda s: None)
    summary = [anchor(t, date(2024, 5, 20))[0] for t in GOOD.answers["summarize"][0].split("\n")]
    assert [s.text for s in result.sentences] == PREVIOUS + summary
    assert summary[0] == "사용자는 2024년 5월 셋째 주에 부산으로 이사했다."  # times absolute here too
    assert result.status == "ok"


def test_accumulation_carries_each_stored_sentence_over_with_its_origin(store):
    """What the version diff follows: a carried sentence names the stored sentence it continues."""
    engine = MemoryEngine(store, NgramEmbedder())
    model = StageModel(summarize=GOOD.answers["summarize"])
    uid, _sid, job = _session(store)
    v1 = engine.commit(uid, [Sentence(t) for t in PREVIOUS], base=None, strategy="import", status="ok", author="import")
    v2 = JobRunner(engine, lambda s: make_updater("accumulate", model, engine.embedder)).run(job)
    carried = v2.sentences[: len(PREVIOUS)]
    assert [(s.text, s.provenance, s.origin_id) for s in carried] == [(s.text, "kept", s.id) for s in v1.sentences]
    assert {s.id for s in carried}.isdisjoint(s.id for s in v1.sentences)  # new rows, not the old ones
    assert all(s.provenance == "added" and s.origin_id is None for s in v2.sentences[len(PREVIOUS) :])


def test_parse_and_elapsed_helpers():
    assert parse_sentences(
        "새 기억:\n- 사용자는 A다.\n2) 사용자는 B다.\n잡담\n- 사용자는 A다.\n사용자는 잘린\ufffd"
    ) == ["사용자는 A다.", "사용자는 B다.", "사용자는 잘린"]
    wrapped = (
        "<think>\n사용자는 무엇을 말했나? 먼저 정리하자.\n</think>\n네, 정리했습니다:\n```\n1. 사용자는 A다.\n"
        "Note: I kept every fact.\n2. 사용자는 B다.\n2. 사용자는 B다.\n```"
    )
    assert parse_sentences(wrapped) == ["사용자는 A다.", "사용자는 B다."]
    assert parse_sentences("사용자는 A다.\n<think>\n사용자는 생각 중") == ["사용자는 A다."]  # unclosed: to the end
    assert parse_verdict("검토해 보니 새 기억에 문제가 없습니다. 결론: 통과") == (True, "")
    assert parse_verdict("<think>통과일까?</think>\n아쉽지만 실패입니다. 고양이가 빠졌다")[0] is False
    assert parse_verdict("통과하지 못했습니다")[0] is False and parse_verdict("Looks good")[0] is None
    assert parse_yes_no("<think>음</think>\n답:\n예") is True and parse_yes_no("아니오") is False
    assert parse_yes_no("잘 모르겠어요") is None
    assert parse_yes_no("Note: I kept every fact.\n예") is True and parse_yes_no("예시 답: 예") is None  # words only
    # corpora that write memory otherwise (CareCall, MSC): every content line, but no English drift in Korean
    assert lenient_sentences("```\n1. 손녀가 태어남\nNote: I kept every fact.\n2. 허리가 아프심\n```") == [
        "손녀가 태어남",
        "허리가 아프심",
    ]
    assert lenient_sentences("- I have two cats.\n- I work as a nurse.") == ["I have two cats.", "I work as a nurse."]
    assert elapsed_text(date(2024, 1, 1), date(2024, 1, 4)) == "3일"
    assert elapsed_text(date(2024, 1, 1), date(2024, 3, 1)) == "2개월"
    assert elapsed_text(None, date(2024, 1, 1)) == "첫 대화"


@pytest.mark.parametrize("strategy", ["keem", "accumulate", "operations"])
@pytest.mark.parametrize("flavor", ["openai", "llama-server"])
def test_a_prompt_past_the_servers_context_is_unusable_output_for_every_strategy(strategy, flavor, store):
    """One error policy: a prompt that does not fit (a local model's ContextOverflowError, a server's 400) never fails
    the job; the strategy falls back as for any unusable answer and keeps the previous memory."""
    from models.openai_backend import OpenAIChatModel
    from tests.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer(reply=lambda body: "사용자는 부산으로 이사했다.", context=60, flavor=flavor) as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False, max_retries=0)
        with pytest.raises(ContextOverflowError, match=r"does not fit the context.*KEEM_OPENAI_CONTEXT"):
            model.complete([{"role": "user", "content": "가" * 100}])
        engine = MemoryEngine(store, NgramEmbedder())
        uid, _sid, job = _session(store)
        engine.commit(uid, [Sentence(t) for t in PREVIOUS], base=None, strategy="import", status="ok", author="import")
        version = JobRunner(engine, lambda _: make_updater(strategy, model, engine.embedder)).run(job)
    assert version is not None and version.status == "fallback", strategy
    assert set(PREVIOUS) <= set(version.texts)  # nothing lost
    assert store.queue.get(job)["status"] == "done" and "KEEM_OPENAI_CONTEXT" in str(version.notes), version.notes
