"""Optional reranking (memory/rerank.py, KEEM_RERANKER) through MemoryEngine.search: a tiny cross-encoder built here,
and the chat model as a real one answers (wrapped, cut at its budget, failing, talking nonsense); whatever it does,
a search answers, and a reranker only ever reorders the fused ranking's best candidates."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from chatbot.settings import Settings
from memory.engine import MemoryEngine
from memory.rerank import CANDIDATES, QUERY_CHARS, TEXT_CHARS, load_reranker, parse_order
from memory.store import Sentence, Store
from models.embedders import NgramEmbedder
from models.errors import GenerationError, InputError, ModelUnavailableError
from models.fake import RealisticChatModel, ScriptedChatModel, section
from tests.conftest import build_nli_classifier

# 25 sentences: more than CANDIDATES, so the bound shows
HOBBIES = "등산 요리 독서 수영 뜨개질 낚시 요가 테니스 골프 볼링 탁구 농구 "
HOBBIES += "축구 배구 스키 서핑 달리기 필라테스 복싱 바둑 체스 캠핑 드럼 기타 피아노"
MEMORY = [f"사용자는 취미로 {hobby}를 한다" for hobby in HOBBIES.split()]
MEMORY[7] = "사용자는 남편이 지방으로 발령이 나서 주말부부로 지낸다"  # shares no word with the message below
QUERY = "취미로 등산이나 요리를 한다지만 요즘은 금요일마다 KTX 역에 마중 나가는 게 일이야"
WEEKEND = "주말부부"


def _engine(store: Store, reranker: object = None) -> tuple[MemoryEngine, int]:
    engine = MemoryEngine(store, NgramEmbedder(), method="hybrid", reranker=reranker)  # type: ignore[arg-type]
    uid = store.users.get_or_create("minsu")
    engine.commit(uid, [Sentence(t) for t in MEMORY], base=None, strategy="import", status="ok", author="import")
    return engine, uid


def _fused(store: Store, uid: int, query: str = QUERY, k: int = CANDIDATES) -> list[str]:
    return [h.text for h in MemoryEngine(store, NgramEmbedder(), method="hybrid").search(uid, query, k=k)]


def _ideal(messages: list[dict[str, str]]) -> str:
    """A good reranker's answer: the numbers of the sentences about a weekend marriage (the message's meaning)."""
    shown = section(messages[-1]["content"], "기억:", "답:")
    return "순서: " + ", ".join(str(n) for n, line in enumerate(shown, 1) if WEEKEND in line)


def test_the_chat_model_puts_the_sentence_it_names_first_and_keeps_the_rest_in_the_fused_order(store: Store) -> None:
    model = ScriptedChatModel(responder=_ideal)  # type: ignore[arg-type]
    engine, uid = _engine(store, load_reranker("chat", model))
    fused = _fused(store, uid)
    assert MEMORY[7] in fused and fused[0] != MEMORY[7]  # the fused ranking has it, but not first
    hits = engine.search(uid, QUERY, k=5)
    assert [h.text for h in hits] == [MEMORY[7], *[t for t in fused if t != MEMORY[7]][:4]]
    fused_scores = {h.text: h.score for h in MemoryEngine(store, NgramEmbedder()).search(uid, QUERY, k=25)}
    assert all(h.score == pytest.approx(fused_scores[h.text]) for h in hits)  # reordered, scores as fused
    [prompt] = [call[-1]["content"] for call in model.calls]
    assert QUERY in prompt and len(section(prompt, "기억:", "답:")) == CANDIDATES  # bounded: 20 of 25
    assert model.options[0].max_new_tokens <= 96 and model.options[0].temperature == 0.0


def test_a_long_message_and_long_sentences_reach_the_model_cut_to_their_bounds(store: Store) -> None:
    model = ScriptedChatModel(responder=lambda _m: "순서: 1")
    engine, uid = _engine(store, load_reranker("chat", model))
    long = [Sentence(t) for t in [*MEMORY, "사용자는 " + "아주 " * 300 + "긴 문장을 썼다"]]
    engine.commit(uid, long, base=1, strategy="import", status="ok", author="import")
    assert engine.search(uid, "고양이 " * 5_000, k=1)
    prompt = model.calls[0][-1]["content"]
    assert ("고양이 " * 5_000)[: QUERY_CHARS + 1] not in prompt and ("고양이 " * 5_000)[:QUERY_CHARS] in prompt
    assert all(len(line) <= TEXT_CHARS + 4 for line in section(prompt, "기억:", "답:"))


@pytest.mark.parametrize(
    "answer",
    [
        "<think>\n메시지는 기차역 마중 이야기다. 주말부부 문장이 맞다.\n</think>\n순서: {n}",
        "```\n순서: {n}\n```",
        "네, 정리했습니다:\n순서: {n}, 99, {n}",  # a number past the list and a repeat are ignored
        "{n}",
        "예시 답: 순서: 2, 3\n순서: {n}",  # the prompt's example quoted first: the last line decides
    ],
)
def test_a_wrapped_answer_is_read(store: Store, answer: str) -> None:
    model = ScriptedChatModel(responder=lambda m: answer.format(n=_ideal(m).removeprefix("순서: ")))  # type: ignore[arg-type]
    engine, uid = _engine(store, load_reranker("chat", model))
    assert engine.search(uid, QUERY, k=1)[0].text == MEMORY[7]


@pytest.mark.parametrize(
    "reply",
    [
        "잘 모르겠어요. 어느 문장도 관련이 없어 보입니다.",  # garbage: no number
        "",
        "순서: 0, 77",  # numbers that name no candidate
        "순서: " + ", ".join(["8"] * 200),  # cut at its budget: unusable, even where its start reads well
        GenerationError("429 Too Many Requests; the backend's retries ran out"),
    ],
)
def test_a_garbage_cut_or_failed_answer_keeps_the_fused_order(store: Store, reply: str | Exception) -> None:
    model = ScriptedChatModel(replies=[reply])
    engine, uid = _engine(store, load_reranker("chat", model))
    assert [h.text for h in engine.search(uid, QUERY, k=5)] == _fused(store, uid, k=5)
    assert len(model.calls) == 1


def test_a_realistic_model_with_every_habit_never_breaks_a_search(store: Store) -> None:
    habits = {"think": 0.3, "preamble": 0.5, "fences": 0.5, "english": 0.3, "repeat": 0.3, "fail": 0.2}
    model = RealisticChatModel(_ideal, habits, seed=3)  # type: ignore[arg-type]
    engine, uid = _engine(store, load_reranker("chat", model))
    fused = _fused(store, uid, k=5)
    firsts = []
    for _ in range(12):
        hits = [h.text for h in engine.search(uid, QUERY, k=5)]
        assert len(hits) == 5 and set(hits) <= set(MEMORY)
        assert hits == fused or hits[0] == MEMORY[7]  # either the model's order or, when it failed, the fused one
        firsts.append(hits[0])
    finishes = [c["finish"] for c in model.calls]
    assert "error" in finishes and MEMORY[7] in firsts  # both happened in these 12 turns


def test_parse_order_keeps_the_order_and_ignores_what_is_not_a_candidate() -> None:
    assert parse_order("순서: 3, 1, 2", 3) == [2, 0, 1]
    assert parse_order("Order: 2 > 1", 3) == [1, 0]
    assert parse_order("순서: 없음", 3) is None
    assert parse_order("1번 문장이 제일 좋아요 그리고 나머지도", 3) is None  # prose, not a list
    assert parse_order("", 3) is None


def _cross_encoder(tmp_path: Path) -> str:
    return build_nli_classifier(tmp_path / "ce", {0: "relevance"}, always=None)


def _scores(folder: str, query: str, texts: list[str]) -> list[float]:
    """Each (query, text) pair's logit, by transformers directly, one pair at a time (no padding)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        return [float(model(**tok(query, t, return_tensors="pt")).logits[0, 0]) for t in texts]


def test_a_cross_encoder_from_a_local_folder_orders_the_candidates_by_its_scores(store: Store, tmp_path: Path) -> None:
    folder = _cross_encoder(tmp_path)
    settings = Settings.load(env={"KEEM_RERANKER": f"cross-encoder:{folder}"})
    engine, uid = _engine(store, load_reranker(settings.reranker, ScriptedChatModel()))
    query = "사용자는 서울에 산다 고양이"
    candidates = _fused(store, uid, query)
    hits = [h.text for h in engine.search(uid, query, k=CANDIDATES)]
    assert sorted(hits) == sorted(candidates)  # the same candidates, reordered
    score = dict(zip(candidates, _scores(folder, query, candidates)))
    assert len({round(s, 4) for s in score.values()}) > 1  # the tiny model's scores differ by pair
    assert all(score[a] >= score[b] - 1e-4 for a, b in itertools.pairwise(hits))  # best score first
    assert [h.text for h in engine.search(uid, query, k=3)] == hits[:3]


def test_the_reranker_is_a_setting_checked_where_it_enters(tmp_path: Path) -> None:
    assert Settings.load(env={}).reranker == "off" and load_reranker("off", ScriptedChatModel()) is None
    for bad in ("on", "cross-encoder:", "llm", "crossencoder:x"):
        with pytest.raises(InputError, match=r"KEEM_RERANKER.*off, chat, or cross-encoder:<local path"):
            Settings.load(env={"KEEM_RERANKER": bad})
    with pytest.raises(ModelUnavailableError, match=r"cannot load cross-encoder.*KEEM_RERANKER=off"):
        load_reranker(f"cross-encoder:{tmp_path / 'missing'}", ScriptedChatModel())
    demo = ScriptedChatModel(spec="demo")
    demo.runs_to_budget = "it never ends an answer on its own"
    with pytest.raises(InputError, match="cannot rerank"):
        load_reranker("chat", demo)
