"""Relatedness by meaning: changes said in new words are applied, unrelated facts still never go.

The update model here is ours: an ideal responder for one small Korean world, spoiled by RealisticChatModel's
habits (wrappers, numbering, dropped lines, outdated lines kept verbatim) and, where it matters, a judge that
answers "예" to every question.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date

import pytest

from memory.dates import anchor
from memory.store import Sentence
from memory.text import parse_yes_no_list
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput, UpdateResult
from memory.updaters.relatedness import attributes, evidence, named, pair_drops
from models.embedders import NgramEmbedder
from models.fake import RealisticChatModel, section, stage_of

SEOUL = "사용자는 서울 마포구에 산다."
BUSAN = "사용자는 2026년 11월 말에 부산으로 이사했다."
PEANUT = "사용자는 땅콩 알레르기가 있다."
UNRELATED = [
    PEANUT,
    "사용자는 고양이 두 마리를 키운다.",
    "사용자는 주말마다 등산을 한다.",
    "사용자는 추리 소설을 즐겨 읽는다.",
]
MOVE = [
    {"role": "assistant", "text": "요즘 어떻게 지내요?"},
    {"role": "user", "text": "부산으로 이사했어. 창밖으로 바다가 보여."},
    {"role": "assistant", "text": "멋지네요!"},
]


# -- the evidence: a small table of attributes, tested -------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "attribute"),
    [
        (SEOUL, BUSAN, "residence"),
        ("사용자는 작은 출판사에 다니는 회사원이다.", "사용자는 요즘 프리랜서 번역가로 활동한다.", "work"),
        ("사용자는 남자친구와 사귄다.", "사용자는 11월에 연인과 헤어져서 마음이 허전하다.", "relationship"),
        ("사용자는 담배를 피운다.", "사용자는 2주째 금연하고 있다.", "habit"),
        ("사용자는 허리 디스크로 고생하고 있다.", "사용자는 몸이 다 나아서 홀가분해한다.", "health"),
        ("사용자는 내년 봄에 유학을 갈 계획이다.", "사용자는 면접에서 떨어져 속상해한다.", "plan"),
        ("사용자는 고3 수험생이다.", "사용자는 대학에 합격해서 새내기가 되었다.", "study"),
        ("사용자는 휴학 중이다.", "사용자는 이번 학기에 복학했다.", "study"),
        ("사용자는 군 복무 중이다.", "사용자는 지난달에 전역했다.", "service"),
        ("사용자는 임신 중이다.", "사용자는 지난주에 딸을 낳았다.", "family"),  # the newborn is someone else
    ],
)
def test_a_change_said_in_new_words_is_paired_by_the_attribute_it_changes(old, new, attribute):
    found = evidence(old, new)
    assert found is not None and attribute in found.attributes and not found.words  # no shared word needed


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("사용자는 매운 음식을 좋아한다.", "사용자는 점심으로 칼국수를 먹었다."),
        ("사용자는 부산에 산다.", "사용자는 오늘 산책을 했다."),
        (PEANUT, "사용자는 감기에 걸려 고생했다."),  # an allergy is no passing illness
        ("사용자는 할머니가 제주도에 사신다.", BUSAN),  # the grandmother's home is not the user's
        ("사용자는 고양이 두 마리를 키운다.", "사용자는 요즘 회사 일이 바빠서 힘들어한다."),
        ("사용자는 동생이 대학생이다.", "사용자는 올해 2월에 졸업했다."),  # the brother's schooling
        ("사용자는 추리 소설을 즐겨 읽는다.", "사용자는 지난달에 전역했다."),
        # a shared time of day, number or light noun says nothing of what two facts are about
        ("사용자는 아침마다 라떼를 마신다.", "사용자는 매일 아침 줄넘기를 한다."),
        ("사용자는 생일이 3월 5일이다.", "사용자는 2024년 5월 1일에 공원을 걸었다."),
        ("사용자는 한 달에 한 번 도서관에서 봉사활동을 한다.", "사용자는 주민센터 합창단에서 활동한다."),
    ],
)
def test_unrelated_facts_are_not_paired(old, new):
    assert evidence(old, new) is None


def test_pairs_prefer_the_strongest_evidence_and_stay_within_the_budget():
    pairs = pair_drops([SEOUL, PEANUT], ["사용자는 점심으로 김밥을 먹었다.", BUSAN])
    assert [(p.old, p.new) for p in pairs] == [(0, BUSAN)]
    many = [f"사용자는 {i}번째 집에 산다." for i in range(20)]
    assert len(pair_drops(many, [BUSAN])) == 8


def test_the_verifier_names_sentences_quoted_or_paraphrased():
    texts = [SEOUL, PEANUT, BUSAN]
    assert named(f"'{SEOUL}'와 '{BUSAN}'는 서로 모순됩니다.", texts) == [0, 2]
    assert named("서울 마포구에 산다는 문장이 부산 이사와 맞지 않습니다.", texts) == [0]
    assert attributes("사용자는 예전에는 서울에 살았다.") == {"residence"}


def test_numbered_verdicts_are_read_through_wrappers():
    assert parse_yes_no_list("<think>음</think>\n1: 예\n2: 아니오", 2) == [True, False]
    assert parse_yes_no_list("네, 정리했습니다:\n1. 1: 아니오\n2. 2: 예\nNote: done.\n2: 아니오", 2) == [False, True]
    assert parse_yes_no_list("예", 1) == [True] and parse_yes_no_list("예", 2) == [None, None]
    assert parse_yes_no_list("1: 잘 모르겠어요", 2) == [None, None]


# -- scenarios through the updater ---------------------------------------------------------------------------
def world(
    summary: list[str],
    replaces: dict[str, str | None],
    *,
    judge: Callable[[str, str], bool] | None = None,
    clash: tuple[str, str] | None = None,
) -> Callable[[list[dict[str, str]]], str]:
    """The ideal answers for one session: `summary`; the rewrite replaces each key of `replaces` by its value (None:
    leaves it out); the judge says 예 exactly for pairs whose old sentence `replaces` ends (or as `judge` says);
    the verifier fails while both sentences of `clash` are in the memory, naming them."""

    def respond(messages: list[dict[str, str]]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage in ("summarize", "reflect"):
            return "\n".join(summary)
        if stage == "update":
            previous = section(prompt, "\n이전 기억:", "이번 요약:")
            out = [replaces.get(line, line) for line in previous]
            return "\n".join(dict.fromkeys([t for t in out if t] + summary))
        if stage == "guard":
            lines = section(prompt, "\n질문:", "답:")
            pairs = [re.match(r"\d+\. A: (.*) / B: (.*)", line).groups() for line in lines]  # type: ignore[union-attr]
            says = judge or (lambda old, new: old in replaces)
            return "\n".join(f"{n}: {'예' if says(a, b) else '아니오'}" for n, (a, b) in enumerate(pairs, 1))
        if stage == "verify":
            memory = section(prompt, "\n새 기억:", "답:")
            if clash and all(t in memory for t in clash):
                return f"실패: '{clash[0]}'와 '{clash[1]}'는 서로 모순됩니다."
            return "통과"
        return ""

    return respond


def update(model: RealisticChatModel, previous: list[str], dialogue=MOVE, ceiling: int = 512) -> UpdateResult:
    inp = UpdateInput(
        [Sentence(t, "kept", id=i + 1) for i, t in enumerate(previous)], dialogue, date(2026, 11, 28), date(2026, 11, 2)
    )
    return make_updater("keem", model, NgramEmbedder(), max_new_tokens=ceiling).update(inp, lambda stage: None)


def stages(model: RealisticChatModel) -> list[str | None]:
    """The stage of each answered call (an answer cut at its budget is asked again: the rule of every call)."""
    return [stage_of(c["messages"][-1]["content"]) for c in model.calls if c["finish"] != "length"]  # type: ignore[index]


WRAPPING = {h: 0.5 for h in ("think", "preamble", "fences", "bullets", "english", "repeat", "free_verdict")}


def test_a_move_said_without_a_shared_word_replaces_the_old_home_in_one_judge_call():
    model = RealisticChatModel(world([BUSAN], {SEOUL: None}), WRAPPING, seed=1)
    result = update(model, [SEOUL, *UNRELATED])
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and SEOUL not in texts and BUSAN in texts
    assert all(f in texts for f in UNRELATED)
    decision = result.details["attempts"][0]["guard"][0]
    assert decision["action"] == "dropped" and decision["evidence"] == "same residence"
    # 4 calls + 1 judge call, as before, and the emotion records step every strategy runs after its update
    # (the scope call: the unrelated facts were kept word for word beside the new home; it names none of them)
    assert stages(model) == ["summarize", "reflect", "update", "scope", "guard", "verify", "emotions"]


@pytest.mark.parametrize(
    ("old", "turn", "new"),
    [
        (
            "사용자는 작은 출판사에 다니는 회사원이다.",
            "요즘 프리랜서로 일해.",
            "사용자는 11월부터 프리랜서로 활동한다.",
        ),
        ("사용자는 남자친구와 사귄다.", "나 헤어졌어. 마음이 허전해.", "사용자는 11월에 연인과 헤어져 허전해한다."),
        ("사용자는 담배를 피운다.", "나 금연 시작했어! 벌써 2주째야.", "사용자는 11월부터 금연하고 있다."),
        ("사용자는 고3 수험생이다.", "나 대학 붙었어! 이제 새내기야.", "사용자는 대학에 합격해 새내기가 되었다."),
        ("사용자는 군 복무 중이다.", "드디어 집에 왔어. 전역했거든.", "사용자는 11월에 전역했다."),
    ],
)
def test_work_love_habits_school_and_service_change_the_same_way(old, turn, new):
    dialogue = [{"role": "user", "text": turn}, {"role": "assistant", "text": "그렇군요."}]
    model = RealisticChatModel(world([new], {old: None}), WRAPPING, seed=2)
    result = update(model, [old, *UNRELATED], dialogue)
    texts, new = [s.text for s in result.sentences], anchor(new, date(2026, 11, 28))[0]  # 11월: 2026년 11월
    assert result.status == "ok" and old not in texts and new in texts and all(f in texts for f in UNRELATED)


def test_history_in_the_past_tense_is_kept_and_a_present_tense_contradiction_is_resolved_on_retry():
    past = "사용자는 예전에는 서울 마포구에 살았다."
    kept = RealisticChatModel(world([BUSAN], {SEOUL: past}), WRAPPING, seed=3)
    result = update(kept, [SEOUL, *UNRELATED])
    assert result.status == "ok" and past in [s.text for s in result.sentences]
    assert result.details["attempts"][0]["guard"][0]["action"] == "rewritten"  # history, not a drop
    # a model that keeps the old home word for word beside the new one, every time (the verifier says so)
    stale = RealisticChatModel(world([BUSAN], {SEOUL: None}, clash=(SEOUL, BUSAN)), {**WRAPPING, "stale": 1.0}, seed=4)
    result = update(stale, [SEOUL, *UNRELATED])
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and SEOUL not in texts and BUSAN in texts and all(f in texts for f in UNRELATED)
    retry = result.details["attempts"][1]["guard"][0]
    assert retry["action"] == "dropped" and retry["evidence"] == "named by the verifier"
    # the old retry's 6, the first attempt's scope call (it names nothing here), a judge call, records
    assert stages(stale).count("guard") == 1 and len(stages(stale)) == 9


def test_an_unrelated_fact_dropped_silently_comes_back_even_when_the_judge_says_yes_to_everything():
    model = RealisticChatModel(world([BUSAN], {SEOUL: None, PEANUT: None}, judge=lambda a, b: True), WRAPPING)
    result = update(model, [SEOUL, *UNRELATED])
    texts = [s.text for s in result.sentences]
    assert PEANUT in texts and SEOUL not in texts and all(f in texts for f in UNRELATED)
    guard = {d["sentence"]: d for d in result.details["attempts"][0]["guard"]}
    assert guard[PEANUT]["action"] == "restored" and not guard[PEANUT]["related"]  # never put to the judge


def test_a_model_dropping_lines_at_random_loses_no_unrelated_fact():
    model = RealisticChatModel(world([BUSAN], {SEOUL: None}), {**WRAPPING, "drop": 1.0}, seed=5)
    result = update(model, [SEOUL, *UNRELATED])
    texts = [s.text for s in result.sentences]
    assert model.dropped and all(f in texts for f in UNRELATED) and SEOUL not in texts


def test_a_finished_episode_is_kept_as_past_with_its_emotion_and_cause():
    ill = "사용자는 허리 디스크로 고생하고 있어서 괴로워한다."
    healed = "사용자는 허리 디스크로 고생하다가 2026년 11월에 다 나아서 홀가분해한다."
    dialogue = [
        {"role": "user", "text": "이제 다 나았어! 병원 안 가도 된대."},
        {"role": "assistant", "text": "다행이에요!"},
    ]
    summary = ["사용자는 2026년 11월에 몸이 다 나아서 홀가분해한다."]
    model = RealisticChatModel(world(summary, {ill: healed, summary[0]: None}), WRAPPING, seed=6)
    result = update(model, [ill, *UNRELATED], dialogue)
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and healed in texts and ill not in texts and all(f in texts for f in UNRELATED)
    assert result.details["attempts"][0]["guard"][0]["action"] == "rewritten"


def test_a_large_memory_shows_the_old_home_to_the_scoped_rewrite_and_applies_the_move():
    hobbies = ["등산", "수영", "테니스", "요가", "볼링", "낚시", "바둑", "탁구", "스키", "마라톤"]
    foods = ["김치찌개", "냉면", "떡볶이", "초밥", "칼국수", "삼겹살", "마라탕", "잡채", "카레", "순대"]
    facts = [f"사용자는 주말마다 {h}을 즐긴다." for h in hobbies] + [f"사용자는 {f}를 좋아한다." for f in foods]
    facts = [*facts[:12], SEOUL, *facts[12:], *UNRELATED]
    model = RealisticChatModel(world([BUSAN], {SEOUL: None}), WRAPPING, seed=7)
    result = update(model, facts, ceiling=256)
    prompt = next(
        c["messages"][-1]["content"] for c in model.calls if stage_of(c["messages"][-1]["content"]) == "update"
    )  # type: ignore[index]
    shown = section(prompt, "\n이전 기억:", "이번 요약:")
    assert "scope" in result.details and SEOUL in shown and len(shown) < len(facts)
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and SEOUL not in texts and BUSAN in texts
    assert all(f in texts for f in facts if f != SEOUL)


def test_the_subject_of_every_sentence_is_no_shared_topic():
    """Kiwi reads "사용자는 왼손잡이다" as 사용 + 자; a judge that agrees with everything removed it for a peanut."""
    assert evidence("사용자는 왼손잡이다.", PEANUT) is None


def test_the_embedder_only_breaks_ties_between_candidates_with_equal_evidence():
    import numpy as np

    asked: list[int] = []

    def cosine(a, b):
        asked.append(1)
        return np.array([[0.1, 0.9]])

    moves = ["사용자는 이사 준비로 바쁘다.", BUSAN]
    assert [p.new for p in pair_drops([SEOUL], moves, cosine)] == [BUSAN] and asked
    asked.clear()
    assert [p.new for p in pair_drops([SEOUL], [BUSAN, "사용자는 점심을 먹었다."], cosine)] == [BUSAN] and not asked
