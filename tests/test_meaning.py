"""Relatedness by meaning (issue 31): the rewrite claims what it replaced, the judge confirms only claims, the scoped
rewrite is shown what the model names; and no claim, however a model spoils it, loses a fact.

The model is benchmarks/update_correctness.py's ideal responder for its Korean scenarios (changes said in words the
old fact does not share, for attributes outside any list), spoiled by RealisticChatModel's habits where it matters.
"""

from __future__ import annotations

from datetime import date

import pytest

from benchmarks.update_correctness import (
    HUGE_CONTEXT,
    SLOPPY,
    Case,
    Ideal,
    cases,
    dialogue,
    load_world,
    model_for,
    run,
    run_case,
)
from memory.dates import anchor
from memory.prompts import render
from memory.store import Sentence
from memory.text import parse_numbers
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput, memory_of
from memory.updaters.claims import OVER_TEXT, Claim, resolve, split_claims
from memory.updaters.guard import guard
from memory.updaters.steps import SCOPE_WINDOW_TOKENS, Steps
from models.embedders import NgramEmbedder
from models.errors import ContextOverflowError
from models.fake import RealisticChatModel, ScriptedChatModel, section, stage_of

WORLD = load_world()
NINE = ("eyesight", "phone", "diet", "hair", "sleep", "weight", "chinese", "rank", "car")
WRAPPING = {h: 0.5 for h in ("think", "preamble", "fences", "bullets", "english", "repeat", "free_verdict")}
OLD, NEW = "사용자는 시력이 나빠서 안경을 쓴다.", "사용자는 지난달 라식 수술을 받아 맨눈으로도 잘 보여서 기뻐한다."


# -- reading claims -----------------------------------------------------------------------------------------
def test_claims_are_read_through_wrappers_and_never_become_memory():
    answer = (
        "<think>\n사용자는 라식을 했다 => 정리\n</think>\n네, 정리했습니다:\n```\n- 사용자는 고양이를 키운다.\n"
        f"- {NEW}\n- 바뀐 문장:\n1. {OLD} => {NEW}\n2. 사용자는 아이폰을 쓴다. → 끝남\n```\nNote: done."
    )
    memory, claims = split_claims(answer)
    assert "=>" not in memory and "라식을 했다" not in memory and NEW in memory and "고양이" in memory
    assert claims == [Claim(OLD, NEW), Claim("사용자는 아이폰을 쓴다.", None)]
    # no marker: an arrow line is still a claim; a line cut after its arrow is no claim
    assert split_claims(f"{NEW}\n{OLD} => {NEW}\n사용자는 아이폰을 쓴다. =>")[1] == [Claim(OLD, NEW)]
    assert split_claims(f"{NEW}\n바뀐 문장: 없음") == (NEW, [])


def test_a_claim_counts_only_when_both_sides_are_found():
    previous, candidates = [OLD, "사용자는 고양이를 키운다."], [NEW]
    assert resolve([Claim(OLD, NEW)], previous, candidates) == [(0, NEW)]
    assert resolve([Claim(OLD.rstrip("."), NEW[:-1])], previous, candidates) == [(0, NEW)]  # the period aside
    assert resolve([Claim(OLD, "사용자는 지난달 라")], previous, candidates) == []  # cut mid-sentence
    assert resolve([Claim("사용자는 강아지를 키운다.", NEW)], previous, candidates) == []  # no such sentence
    assert resolve([Claim(OLD, None)], previous, candidates) == [(0, OVER_TEXT)]


def test_scope_numbers_are_read_through_wrappers():
    assert parse_numbers("<think>1번?</think>\n네:\n- 번호: 3, 17, 99", 20) == [2, 16]
    assert parse_numbers("번호: 없음", 5) == [] and parse_numbers("2, 4", 5) == [1, 3]
    assert parse_numbers("잘 모르겠어요", 5) is None


def test_the_judge_is_asked_about_claims_and_a_claimed_line_kept_word_for_word():
    iphone = "사용자는 아이폰을 쓴다."
    previous = [Sentence(t, "kept", id=i) for i, t in enumerate([OLD, "사용자는 고양이를 키운다.", iphone])]
    asked: list[tuple[str, str]] = []

    def judge(pairs):
        asked.extend(pairs)
        return [(True, "예")] * len(pairs)

    # the cat is dropped silently (no claim, no evidence): restored though the judge agrees with everything;
    # the phone line is copied back, yet claimed replaced: judged and removed
    galaxy = "사용자는 최근 갤럭시로 바꿔서 큰 화면에 만족한다."
    sentences, decisions = guard(
        previous, [NEW, galaxy, iphone], session_texts=[], judge=judge, claimed=[(0, NEW), (2, galaxy)]
    )
    texts = [s.text for s in sentences]
    assert asked == [(OLD, NEW), ("사용자는 아이폰을 쓴다.", galaxy)]
    assert OLD not in texts and "사용자는 아이폰을 쓴다." not in texts and "사용자는 고양이를 키운다." in texts
    assert [d.action for d in decisions] == ["dropped", "restored", "dropped"]


# -- through the updater ------------------------------------------------------------------------------------
def small(name: str) -> Case:
    return next(c for c in cases(WORLD, ("small",)) if c.name == name)


@pytest.mark.parametrize("name", NINE)
def test_each_change_outside_any_list_is_applied_with_a_verifier_that_names_nothing(name):
    case = small(name)
    model = model_for(WORLD, "ideal", "silent", 0)
    model.inner.habits.update(WRAPPING)  # type: ignore[attr-defined]
    got = run_case("keem", case, model, NgramEmbedder())
    assert got["outdated_left"] == 0 and got["new_missing"] == 0 and got["unrelated_lost"] == 0
    assert got["fallbacks"] == 0 and got["llm_calls"] == 7  # summarize, reflect, update, scope, guard, verify, emotions


def test_a_judge_that_agrees_with_everything_loses_no_unrelated_fact_small_or_large():
    for case in [small("eyesight"), small("car"), cases(WORLD, ("large",))[1], *cases(WORLD, ("sessions",))]:
        model = model_for(WORLD, "yes", "silent", 3)
        model.inner.habits["drop"] = 1.0  # type: ignore[attr-defined]
        got = run_case("keem", case, model, NgramEmbedder())
        assert got["unrelated_lost"] == 0, got["lost"]


def _updated(responder, previous: list[str], turn: str, ceiling: int = 512, habits=None):
    model = RealisticChatModel(responder, habits or {}, seed=1)
    inp = UpdateInput(memory_of(previous), [{"role": "user", "text": turn}], date(2026, 11, 28), date(2026, 11, 2))
    result = make_updater("keem", model, NgramEmbedder(), max_new_tokens=ceiling).update(inp, lambda s: None)
    return result, model


def test_a_cut_a_wrapped_or_a_missing_claim_list_loses_no_fact():
    """No usable claim (cut, or no claims section): the scope call, asked then, names the old sentence, and the judge
    confirms it against what the rewrite added; a wrapped answer's claims are read as they are."""
    ideal = Ideal(WORLD, catches=False)
    case = small("eyesight")
    previous, turn = [f.text for f in case.initial], case.sessions[0][0].turn

    def spoiled(how):
        def respond(messages):
            answer = ideal(messages)
            if stage_of(messages[-1]["content"]) != "update":
                return answer
            head, _, claims = answer.partition("바뀐 문장:")
            if how == "cut":  # the claim stops mid-sentence, as at a token limit
                return head + "바뀐 문장:" + claims[: len(claims) // 2]
            if how == "missing":
                return head
            return f"<think>\n{claims}\n</think>\n```\n{answer}\n```"

        return respond

    for how in ("cut", "missing", "wrapped"):
        result, model = _updated(spoiled(how), previous, turn)
        texts = [s.text for s in result.sentences]
        new = anchor(NEW, date(2026, 11, 28))[0]  # "지난달" stored as the month it was: 2026년 10월
        assert all(t in texts for t in previous if t != OLD) and new in texts and OLD not in texts, how
        scoped = [c for c in model.calls if stage_of(c["messages"][-1]["content"]) == "scope"]
        # asked once: for the drop no claim explains, or the lines kept word for word beside the news
        assert len(scoped) == 1, how


def test_an_answer_cut_at_its_token_budget_in_its_claims_is_used_up_to_the_cut():
    """A model that rambles after its claims past twice its budget: the memory and the whole claims before the cut
    are used (no fallback); an answer cut before its claims is never used."""
    ideal = Ideal(WORLD, catches=False)
    case = small("diet")
    previous, turn = [f.text for f in case.initial], case.sessions[0][0].turn
    old, new = case.initial[[f.kind for f in case.initial].index("change")].text, case.sessions[0][0].text
    new = anchor(new, date(2026, 11, 28))[0]  # "두 달 전부터" stored as "2026년 9월부터"

    def rambling(messages):
        answer = ideal(messages)
        if stage_of(messages[-1]["content"]) == "update":
            return answer + "\n" + "이 문장은 이번 대화와 관계가 없어서 그대로 두었고 " * 400
        return answer

    result, model = _updated(rambling, previous, turn)
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and old not in texts and new in texts
    assert all(t in texts for t in previous if t != old)
    assert [c["finish"] for c in model.calls if stage_of(c["messages"][-1]["content"]) == "update"] == [
        "length",
        "length",
    ]


def test_the_scoped_rewrite_is_shown_what_the_model_names_by_meaning():
    case = next(c for c in cases(WORLD, ("large",)) if c.name == "rank")
    model = model_for(WORLD, "ideal", "silent", 0)
    got = run_case("keem", case, model, NgramEmbedder())
    prompts = [c["messages"][-1]["content"] for c in model.inner.calls]  # type: ignore[attr-defined]
    shown = section(next(p for p in prompts if stage_of(p) == "update"), "\n이전 기억:", "이번 요약:")
    assert "사용자는 직급이 대리다." in shown and len(shown) < len(case.initial)
    assert got["outdated_left"] == 0 and got["unrelated_lost"] == 0 and got["scope_calls"] == 1
    # a scope answer nobody can read: the scope is the table's and the words' (the change may stay; nothing is lost)
    unreadable = RealisticChatModel(
        lambda m: "글쎄요" if stage_of(m[-1]["content"]) == "scope" else Ideal(WORLD, False)(m), SLOPPY, seed=2
    )
    result = make_updater("keem", unreadable, NgramEmbedder()).update(
        UpdateInput(memory_of(f.text for f in case.initial), dialogue(case.sessions[0]), date(2026, 11, 28)),
        lambda s: None,
    )
    texts = [s.text for s in result.sentences]
    assert all(f.text in texts for f in case.initial if f.kind == "stable")


def test_the_benchmark_meets_its_acceptance_figures():
    """Ideal model: 0 outdated, 0 lost, 0 fallbacks with either verifier, small and large, over 5 sessions; a judge
    that agrees with everything: 0 lost."""
    ideal = run(("keem",), models=("ideal",), embedder=NgramEmbedder())
    assert {r["setting"] for r in ideal} == {"small", "large", "sessions", "sessions-large", "huge", "time"}
    assert all(r["outdated_left"] == 0 and r["unrelated_lost"] == 0 and r["fallbacks"] == 0 for r in ideal), ideal
    timed = next(r for r in ideal if r["setting"] == "time")  # every date stored absolute, no passed plan ahead
    assert timed["dates_right"] == timed["dates"] == timed["final_right"] >= 8 and timed["still_future"] == 0
    assert all(r["episodes_kept"] == r["episodes"] for r in ideal)
    yes = run(("keem",), models=("yes",), verifiers=("silent",), embedder=NgramEmbedder())
    assert all(r["unrelated_lost"] == 0 for r in yes), [r["lost"] for r in yes]
    small_yes = next(r for r in yes if r["setting"] == "small")  # a forgotten claim: the scope's name applies it
    assert small_yes["outdated_left"] == 0 and small_yes["scope_calls"] > 0, small_yes


def test_a_sloppy_model_with_a_silent_verifier_leaves_no_outdated_fact_in_any_setting():
    """Stale lines copied back with no claim, drops with no claims section: the scope call and the two-way judge
    catch them without the verifier's help, and lose nothing unrelated."""
    sloppy = run(("keem",), models=("sloppy",), verifiers=("silent",), embedder=NgramEmbedder())
    assert all(r["outdated_left"] == 0 and r["fallbacks"] == 0 for r in sloppy), [r["outdated"] for r in sloppy]
    assert all(r["unrelated_lost"] == 0 for r in sloppy), [r["lost"] for r in sloppy]
    timed = next(r for r in sloppy if r["setting"] == "time")
    assert timed["dates_right"] == timed["dates"] and timed["still_future"] == 0


def test_peers_gives_one_row_per_system_from_one_run(monkeypatch, tmp_path):
    """benchmarks/peers.py with mem0 (the `peers` extra; skipped without it) and keem on the same sessions."""
    import importlib.util

    if importlib.util.find_spec("mem0") is None:  # not imported here: it reads its telemetry switch on import
        pytest.skip("mem0ai is not installed (pip install -e '.[peers]')")
    from benchmarks.peers import FIELDS
    from benchmarks.peers import run as peers

    monkeypatch.setenv("MEM0_TELEMETRY", "False")  # restored after: run() sets both for mem0
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))

    rows = peers(("mem0", "keem"), ("sessions",))
    assert [r["system"] for r in rows] == ["mem0", "keem"] and all(set(FIELDS) <= set(r) for r in rows)
    mem0, keem = rows
    assert keem["outdated_left"] == 0 and keem["unrelated_lost"] == 0 and mem0["unrelated_lost"] == 0
    assert mem0["changes"] == keem["changes"] == 12 and mem0["llm_calls"] == 5  # one extraction per session


def test_a_rewrite_that_keeps_the_claims_protocol_is_taken_at_its_word():
    """A drop it claims nothing about is silent: restored without the judge, though it shares a noun with the session
    and the judge agrees with everything; a rewrite with no claims section gets the attribute table's pairs."""
    gimbap, lunch = "사용자는 김밥을 잘 만든다.", "사용자는 오늘 점심으로 김밥을 먹었다."
    previous = [OLD, gimbap, "사용자는 고양이 두 마리를 키운다."]
    asked: list[str] = []

    def respond(messages, claims=True):
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage in ("summarize", "reflect"):
            return f"{NEW}\n{lunch}"
        if stage == "update":
            memory = f"{NEW}\n사용자는 고양이 두 마리를 키운다.\n{lunch}"  # the gimbap fact dropped silently
            return memory + (f"\n바뀐 문장:\n{OLD} => {NEW}" if claims else "")
        if stage == "guard":
            pairs = section(prompt, "\n질문:", "답:")
            asked.extend(pairs)
            return "\n".join(f"{n}: 예" for n in range(1, len(pairs) + 1))
        return "통과" if stage == "verify" else "없음"

    result, _ = _updated(respond, previous, "나 라식 했어! 점심엔 김밥 먹었어.")
    texts = [s.text for s in result.sentences]
    assert gimbap in texts and OLD not in texts and len(asked) == 1 and OLD in asked[0]
    asked.clear()
    result, _ = _updated(lambda m: respond(m, claims=False), previous, "나 라식 했어! 점심엔 김밥 먹었어.")
    texts = [s.text for s in result.sentences]
    assert gimbap not in texts and OLD in texts  # no protocol: the shared noun pairs it, and this judge agrees


def test_a_rewrite_that_lists_its_claims_first_loses_none_of_its_memory():
    answer = f"바뀐 문장:\n{OLD} => {NEW}\n{NEW}\n사용자는 고양이를 키운다.\n사용자는 시력이 나빠"
    memory, claims = split_claims(answer)
    assert memory.splitlines() == [NEW, "사용자는 고양이를 키운다."] and claims == [Claim(OLD, NEW)]


# -- a memory larger than one scope call: read in windows ----------------------------------------------------
def huge(name: str) -> Case:
    return next(c for c in cases(WORLD, ("huge",)) if c.name == name)


def _scope_prompts(model) -> list[str]:
    return [p for c in model.inner.calls if stage_of(p := c["messages"][-1]["content"]) == "scope"]


def test_a_memory_of_200_sentences_on_a_4k_model_keeps_the_change_said_in_other_words():
    """The old eyesight sentence sits at 200 of 201: the whole memory numbered is past a 4,096-token context (the
    fake refuses it, as a server does; the update's one scope call was refused so, and the change stayed), so the
    memory is read in windows, each numbered from 1, and the window holding it names it."""
    case = huge("eyesight")
    previous = [f.text for f in case.initial]
    assert len(previous) == 201 and previous.index(OLD) == 199
    model = model_for(WORLD, "ideal", "silent", 0, context_window=HUGE_CONTEXT)
    whole = render("scope", memory=previous, summary=[NEW])
    with pytest.raises(ContextOverflowError):
        model.complete([{"role": "user", "content": whole}])
    model.calls.clear()
    model.inner.calls.clear()  # type: ignore[attr-defined]
    got = run_case("keem", case, model, NgramEmbedder())
    assert got["outdated_left"] == 0 and got["new_missing"] == 0 and got["unrelated_lost"] == 0
    prompts = _scope_prompts(model)
    shown = [section(p, "\n기억:", "이번 요약:") for p in prompts]
    windows = Steps.for_model(model, NgramEmbedder()).scope_windows(
        previous, section(prompts[0], "\n이번 요약:", "답:")
    )
    assert len(prompts) == got["scope_calls"] == len(windows) >= 3
    assert [w[2] for w in windows] == prompts
    lines = [line for window in shown for line in window]
    assert [line.partition(". ")[2] for line in lines] == previous  # consecutive, the whole memory once
    assert all(line.startswith(f"{n}. ") for window in shown for n, line in enumerate(window, 1))
    assert max(c[1] for c in model.calls if c[0] == "scope") <= SCOPE_WINDOW_TOKENS
    # the estimate of the calls an update makes counts the windows (the summary unknown: the fewest)
    steps = Steps.for_model(model, NgramEmbedder())
    assert steps.update_calls(previous) == 3 + len(steps.scope_windows(previous, []))


def test_a_window_with_an_unusable_answer_names_nothing_and_the_others_still_count():
    previous = [f.text for f in huge("eyesight").initial]
    at = previous.index(OLD)
    ideal = Ideal(WORLD, catches=False)
    answers: list[str] = []

    def first_garbled(messages):
        answers.append("글쎄요, 잘 모르겠어요" if not answers else ideal(messages))
        return answers[-1]

    steps = Steps.for_model(ScriptedChatModel(responder=first_garbled, context_window=HUGE_CONTEXT))
    windows = steps.scope_windows(previous, [NEW])
    assert len(windows) >= 3 and not windows[0][0] <= at < windows[0][1]  # the garbled window does not hold it
    assert steps.pick(previous, [NEW]) == [at] and len(answers) == len(windows)
    assert any("window 1 of" in p for p in steps.problems)
    # no window answers usably: None, so the table's, the words' and the embedder's scope takes over
    nothing = Steps.for_model(ScriptedChatModel(responder=lambda m: "글쎄요", context_window=HUGE_CONTEXT))
    assert nothing.pick(previous, [NEW]) is None
    # a window the model names nothing in counts as an answer
    none = Steps.for_model(ScriptedChatModel(responder=lambda m: "번호: 없음", context_window=HUGE_CONTEXT))
    assert none.pick(previous, [NEW]) == []


def test_a_memory_that_fits_one_window_is_one_call_with_the_prompt_it_always_had():
    case = next(c for c in cases(WORLD, ("large",)) if c.name == "rank")
    previous = [f.text for f in case.initial]
    steps = Steps.for_model(RealisticChatModel(Ideal(WORLD), context_window=HUGE_CONTEXT))
    assert steps.scope_windows(previous, [NEW]) == [(0, len(previous), render("scope", memory=previous, summary=[NEW]))]
    assert steps.update_calls(previous) == 4
