"""Memory updates that survive what real models do: cut answers, wrappers, dropped facts, large memories.

The models here are ours: a loopback OpenAI-compatible server that stops at max_tokens and says so, and
RealisticChatModel with real models' habits. The world they answer from is small: a user's facts and one session.
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from chatbot.cli.main import main
from evaluation.builder import BuildConfig, build_dataset
from evaluation.corpora.episodes import Episode, Session, Turn
from memory.store import Sentence
from memory.store.notes import strings
from memory.text import parse_sentences
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput
from memory.updaters.steps import Steps
from models.fake import STAGE_MARKERS, RealisticChatModel, ScriptedChatModel, section
from models.fake import stage_of as step_of
from tests.fake_openai import FakeOpenAIServer

THINGS = [
    "고양이",
    "강아지",
    "테니스",
    "수영",
    "피아노",
    "등산",
    "낚시",
    "바둑",
    "커피",
    "김치찌개",
    "냉면",
    "떡볶이",
    "자전거",
    "캠핑",
    "독서",
    "뜨개질",
    "사진",
    "영화",
    "재즈",
    "기타",
    "요리",
    "제빵",
    "탁구",
    "볼링",
    "스키",
    "마라톤",
    "화분",
    "여행",
    "일본어",
    "중국어",
    "주식",
    "게임",
    "드라마",
    "만화",
    "노래방",
    "춤",
    "서예",
    "그림",
    "조깅",
    "체스",
]
VERBS = ["{} 좋아한다.", "에 관심이 많다.", "{} 오래 해 왔다.", "{} 주말마다 즐긴다."]


def fact(thing: str, i: int) -> str:
    """ "사용자는 <thing><particle> ..." with 을/를 as the last syllable asks."""
    particle = "을" if (ord(thing[-1]) - 0xAC00) % 28 else "를"
    return f"사용자는 {thing}{VERBS[i % 4].format(particle)}"


FACTS = [fact(thing, i) for i, thing in enumerate(THINGS)]
YOGA = "사용자는 2026년 12월부터 아침마다 요가를 한다."
SCRIPT = "나 이번 달부터 아침마다 요가를 시작했어!\n30분씩 하는데 몸이 가벼워.\n"


def stage_of(prompt: str) -> str:
    return step_of(prompt) or "chat"


def ideal(messages: list[dict[str, Any]]) -> str:
    """A model that does its job: states the yoga fact, lists back every memory sentence it is shown, and more."""
    prompt = messages[-1]["content"]
    stage = stage_of(prompt)
    if stage == "summarize":
        return YOGA if "요가" in prompt.rsplit("\n대화 (", 1)[1] else "사용자는 날씨 이야기를 했다."
    if stage == "reflect":
        return "\n".join(section(prompt, "\n요약:\n", "\n답:"))
    if stage == "update":
        return "\n".join(
            section(prompt, "\n이전 기억:\n", "\n이번 요약:") + section(prompt, "\n이번 요약:\n", "\n새 기억:")
        )
    if stage == "verify":
        return "통과"
    if stage == "guard":
        return "아니오"
    if stage == "scope":  # the session (yoga) changes none of the memory
        return "번호: 없음"
    if stage == "operations":
        return "APPEND"
    return "좋아요, 멋지네요!"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def session_with(
    server: FakeOpenAIServer,
    tmp_path: Path,
    capsys,
    monkeypatch,
    key: bool = True,
) -> list[dict[str, Any]]:
    """`keem memory import` of FACTS, one scripted `keem session` about yoga; the memory after it."""
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "keem.db"))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    if key:
        monkeypatch.setenv("OPENAI_API_KEY", "local")
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "mem.txt").write_text("\n".join(FACTS) + "\n", encoding="utf-8")
    (tmp_path / "s.txt").write_text(SCRIPT, encoding="utf-8")
    assert cli(capsys, "memory", "import", "--user", "minji", str(tmp_path / "mem.txt"))[0] == 0
    code, out, err = cli(
        capsys,
        "session",
        "--user",
        "minji",
        "--model",
        "openai:local",
        "--embedder",
        "auto",
        "--script",
        str(tmp_path / "s.txt"),
    )
    assert code == 0 and "memory v2" in out, err
    code, out, _ = cli(capsys, "memory", "show", "--user", "minji", "--json")
    return json.loads(out)["sentences"]


def assert_whole(sentences: list[dict[str, Any]]) -> None:
    texts = [s["text"] for s in sentences]
    assert [f for f in FACTS if f not in texts] == []  # all 40, verbatim
    assert YOGA in texts
    assert len(texts) == len(set(texts)) == len(FACTS) + 1  # nothing repeated, nothing else
    assert all(re.fullmatch(r"사용자는 .+다\.", t) for t in texts)  # no cut sentence, no wrapper text


@pytest.mark.parametrize("flavor", ["openai", "ollama", "llama-server"])
def test_a_server_that_stops_at_max_tokens_cuts_nothing_into_memory(tmp_path, capsys, monkeypatch, flavor):
    """Also as a laptop user meets it: Ollama or llama.cpp's llama-server, no API key, their quirks."""
    with FakeOpenAIServer(reply=lambda body: ideal(body["messages"]), flavor=flavor) as server:
        sentences = session_with(server, tmp_path, capsys, monkeypatch, key=flavor == "openai")
        budgets = [r["max_tokens"] for r in server.requests if stage_of(r["messages"][-1]["content"]) == "update"]
    assert_whole(sentences)
    assert budgets and max(budgets) <= 512  # 40 sentences: scoped, within KEEM_UPDATE_MAX_TOKENS


@pytest.mark.parametrize("marks", ["numbering", "bullets"])
def test_wrapped_answers_and_a_silently_dropped_fact_leave_memory_whole(tmp_path, capsys, monkeypatch, marks):
    habits = {h: 1.0 for h in ("think", "preamble", "fences", "english", "repeat", "drop", "free_verdict", marks)}
    spoiler = RealisticChatModel(ideal, habits, seed=4)
    with FakeOpenAIServer(
        reply=lambda body: spoiler.spoil(ideal(body["messages"]), body["messages"][-1]["content"])
    ) as server:
        sentences = session_with(server, tmp_path, capsys, monkeypatch)
    assert set(spoiler.dropped) & set(FACTS)  # the server did drop facts
    assert_whole(sentences)
    restored = {s["text"] for s in sentences if s["provenance"] == "restored"}
    assert set(spoiler.dropped) & restored


@pytest.mark.parametrize("embedder", ["auto", "use-multilingual", "minilm", "ngram"])
def test_the_guard_holds_with_every_embedder_we_ship(embedder):
    """6 facts, a session about the weather and lunch, an update model that writes only unrelated sentences."""
    from models import load_embedder

    six = [
        "사용자는 땅콩 알레르기가 있다.",
        "사용자는 고양이 두 마리를 키운다.",
        "사용자는 회계사 시험을 준비하고 있다.",
        "사용자는 부산에 산다.",
        "사용자는 작년에 둘째 딸을 낳았다.",
        "사용자는 매운 음식을 좋아한다.",
    ]
    written = "사용자는 오늘 날씨가 맑다고 했다.\n사용자는 점심으로 칼국수를 먹었다.\n사용자는 산책을 했다."
    model = ScriptedChatModel(
        responder=lambda msgs: {
            "summarize": "사용자는 오늘 날씨가 맑다고 했다.\n사용자는 점심으로 칼국수를 먹었다.",
            "reflect": written,
            "update": written,
            "verify": "통과",
            "guard": "예",
            "scope": "번호: 1, 2, 3, 4, 5, 6",  # names everything: no evidence against any one fact
            "emotions": "없음",
        }[stage_of(msgs[-1]["content"])]
    )
    inp = UpdateInput(
        [Sentence(t, "kept", id=i) for i, t in enumerate(six)],
        [{"role": "user", "text": "오늘 날씨 너무 좋다! 점심은 칼국수 먹었어."}],
        date(2026, 12, 1),
        date(2026, 11, 20),
    )
    result = make_updater("keem", model, load_embedder(embedder)).update(inp, lambda stage: None)
    texts = [s.text for s in result.sentences]
    assert result.status == "ok" and [f for f in six if f not in texts] == []


# -- every call site: a cut answer is retried with a bigger budget, and never used -------------------
def padded(stage: str, pad: int, answers: dict[str, str]):
    """Ideal answers, but `stage`'s carries a reasoning block of `pad` characters first (a verbose model)."""

    def respond(messages):
        answer = answers.get(stage_of(messages[-1]["content"])) or ideal(messages)
        if stage_of(messages[-1]["content"]) == stage:
            answer = "<think>" + "생각" * (pad // 2) + "</think>\n" + answer
        return answer

    return respond


PREVIOUS = FACTS[:5]
DIALOGUE = [
    {"role": "user", "text": "나 이번 달부터 아침마다 요가를 시작했어!"},
    {"role": "assistant", "text": "멋져요!"},
]


def keem(model, ceiling=512):
    inp = UpdateInput(
        [Sentence(t, "kept", id=i) for i, t in enumerate(PREVIOUS)], DIALOGUE, date(2026, 12, 1), date(2026, 11, 20)
    )
    return make_updater("keem", model, None, max_new_tokens=ceiling).update(inp, lambda stage: None)


@pytest.mark.parametrize("stage", ["summarize", "reflect", "update", "verify"])
def test_an_answer_cut_once_is_asked_again_with_twice_the_budget(stage):
    pad = {"summarize": 700, "reflect": 120, "update": 260, "verify": 260}[stage]  # past the budget, within twice it
    model = ScriptedChatModel(responder=padded(stage, pad, {}))
    result = keem(model)
    budgets = [
        o.max_new_tokens for o, call in zip(model.options, model.calls) if stage_of(call[-1]["content"]) == stage
    ]
    assert len(budgets) == 2 and budgets[1] == 2 * budgets[0]
    assert result.status == "ok" and YOGA in [s.text for s in result.sentences]
    assert any("retried" in p for p in result.details["problems"])


@pytest.mark.parametrize("stage", ["summarize", "reflect", "update", "verify"])
def test_an_answer_cut_twice_never_becomes_memory(stage):
    model = ScriptedChatModel(responder=padded(stage, 5000, {}))
    result = keem(model)
    texts = [s.text for s in result.sentences]
    assert texts[:5] == PREVIOUS and all("생각" not in t for t in texts)
    if stage == "reflect":  # the summary is used as it is
        assert result.status == "ok" and YOGA in texts
    else:
        assert result.status == "fallback" and "cut at" in " ".join(strings(result.notes))
    assert any("not used" in p for p in result.details["problems"])


def test_a_cut_guard_answer_restores_the_sentence():
    dropping = {"update": "\n".join(PREVIOUS[1:] + [YOGA]), "guard": "예"}
    model = ScriptedChatModel(responder=padded("guard", 5000, dropping))
    dialogue = [{"role": "user", "text": f"{THINGS[0]} 이야기인데, 이번 달부터 요가를 시작했어!"}]
    inp = UpdateInput([Sentence(t, "kept", id=i) for i, t in enumerate(PREVIOUS)], dialogue, date(2026, 12, 1))
    result = make_updater("keem", model, None).update(inp, lambda stage: None)
    decision = result.details["attempts"][0]["guard"][0]
    assert (
        decision["related"] and decision["action"] == "restored" and PREVIOUS[0] in [s.text for s in result.sentences]
    )


def test_operations_and_cues_treat_cut_answers_as_none():
    from memory.cues import CueWriter

    model = ScriptedChatModel(responder=padded("operations", 5000, {"operations": "DELETE 1"}))
    inp = UpdateInput([Sentence(t, "kept", id=i) for i, t in enumerate(PREVIOUS)], DIALOGUE, date(2026, 12, 1))
    result = make_updater("operations", model, None).update(inp, lambda stage: None)
    assert [s.text for s in result.sentences] == PREVIOUS + [YOGA]  # not DELETE: the cut answer is APPEND
    assert result.details["operations"][0]["operation"] == "APPEND"
    cues = ScriptedChatModel(responder=lambda msgs: "<think>" + "생각" * 3000 + "</think>\n1: 요가, 아침")
    assert CueWriter(cues).write([YOGA]) == {} and len(cues.calls) == 2


# -- large memories: the scoped rewrite ----------------------------------------------------------------
def test_a_large_memory_sends_only_what_the_session_touches_and_carries_the_rest_verbatim():
    facts = FACTS + ["사용자는 요가 학원을 알아보고 있다."]
    model = ScriptedChatModel(
        responder=lambda msgs: (
            "\n".join(s for s in section(msgs[-1]["content"], "\n이전 기억:\n", "\n이번 요약:") if "요가 학원" not in s)
            + f"\n사용자는 요가 학원을 알아보다가 {YOGA[5:]}"
            if stage_of(msgs[-1]["content"]) == "update"
            else ideal(msgs)
        )
    )
    inp = UpdateInput([Sentence(t, "kept", id=i) for i, t in enumerate(facts)], DIALOGUE, date(2026, 12, 1))
    result = make_updater("keem", model, None).update(inp, lambda stage: None)
    update_prompts = [c[-1]["content"] for c in model.calls if stage_of(c[-1]["content"]) == "update"]
    shown = section(update_prompts[0], "\n이전 기억:\n", "\n이번 요약:")
    assert "사용자는 요가 학원을 알아보고 있다." in shown and len(shown) < 10
    unrelated = [f for f in FACTS if f not in shown]
    assert len(unrelated) > 30 and not any(f in update_prompts[0] for f in unrelated)
    carried = {s.text: s.provenance for s in result.sentences}
    assert all(carried[f] == "kept" for f in unrelated)
    assert result.status == "ok" and result.details["scope"]["carried"] == len(unrelated)
    assert any("요가 학원을 알아보다가" in t for t in carried) and "사용자는 요가 학원을 알아보고 있다." not in carried


def test_the_cost_of_an_update_stays_bounded_as_memory_grows():
    def prompt_tokens(n: int) -> int:
        model = ScriptedChatModel(responder=ideal)
        facts = [fact(f"{i}번째 취미인 {THINGS[i % 40]}", i) for i in range(n)]
        inp = UpdateInput([Sentence(t, "kept", id=i) for i, t in enumerate(facts)], DIALOGUE, date(2026, 12, 1))
        make_updater("keem", model, None).update(inp, lambda stage: None)
        return max(sum(len(m["content"]) for m in c) for c in model.calls if stage_of(c[-1]["content"]) == "update")

    assert prompt_tokens(400) < prompt_tokens(40) * 1.2


# -- one pipeline: the dataset builder writes the memory the app would ---------------------------------
def test_the_builder_and_the_app_write_the_same_memory_for_the_same_answers(tmp_path):
    first = Session(
        "s1", [Turn("user", "나는 고양이를 키워."), Turn("assistant", "귀엽겠다!")], list(PREVIOUS), "2026-11-20"
    )
    second = Session("s2", [Turn(t["role"], t["text"]) for t in DIALOGUE], [], "2026-12-01")
    drop_one = {"update": "\n".join(PREVIOUS[1:] + [YOGA])}  # a model that drops a fact: both restore it
    build_dataset(
        [Episode("e1", "synthetic", [first, second])],
        ScriptedChatModel(responder=padded("", 0, drop_one)),
        BuildConfig(out_dir=tmp_path, progress=False),
    )
    row = json.loads((tmp_path / "dataset.jsonl").read_text(encoding="utf-8"))
    app = keem(ScriptedChatModel(responder=padded("", 0, drop_one)))
    assert row["previous_memory"] == PREVIOUS and row["memory"] == [s.text for s in app.sentences]
    assert PREVIOUS[0] in row["memory"] and row["guard"][0]["action"] == "restored"


def test_wrapped_verdicts_and_sentences_parse_the_same_in_every_caller():
    model = RealisticChatModel.all_habits(ideal, rate=1.0, seed=5)
    steps = Steps.for_model(model)
    summary, generated = steps.summarize(DIALOGUE, date(2026, 12, 1))
    assert generated and summary == [YOGA]
    assert steps.verify(PREVIOUS, "사용자: 안녕", PREVIOUS, date(2026, 12, 1)) is None
    assert parse_sentences(model.spoil("\n".join(PREVIOUS), "")) == PREVIOUS


def test_the_builder_never_writes_a_cut_answer_into_a_row(tmp_path):
    first = Session(
        "s1", [Turn("user", "나는 고양이를 키워."), Turn("assistant", "귀엽겠다!")], list(PREVIOUS), "2026-11-20"
    )
    second = Session("s2", [Turn(t["role"], t["text"]) for t in DIALOGUE], [], "2026-12-01")
    model = RealisticChatModel(padded("update", 5000, {}), {"think": 0.0})
    stats = build_dataset(
        [Episode("e1", "synthetic", [first, second])], model, BuildConfig(out_dir=tmp_path, progress=False)
    )
    assert (stats.rows, stats.rejects) == (0, 1)
    reject = json.loads((tmp_path / "rejects.jsonl").read_text(encoding="utf-8"))
    assert reject["reason"] == "the update produced no usable sentence" and reject["memory"] == []
    assert [c["finish"] for c in reject["calls"] if c["stage"] == "update"] == ["length", "length"]
    assert any("not used" in p for p in reject["problems"])


def test_each_stage_marker_the_fakes_answer_by_is_in_its_prompt_file_and_no_other() -> None:
    """The fakes tell update steps apart by a phrase of each prompt: a reworded prompt must fail here, not make
    every fake answer it as chat."""
    prompts = Path(__file__).resolve().parents[1] / "memory" / "prompts"
    texts = {p.stem: p.read_text(encoding="utf-8") for p in prompts.glob("*.txt")}
    for stage, marker in STAGE_MARKERS.items():
        assert [name for name, text in texts.items() if marker in text] == [stage], (stage, marker)
        assert step_of(texts[stage]) == stage
