"""Dense, lexical and hybrid memory search (memory/lexical.py, memory/fusion.py, MemoryEngine's method): BM25 on
Kiwi morphemes kept in step with every version and forget, the fusion rule, the query's earlier turns, and any
text as a query."""

from __future__ import annotations

import numpy as np
import pytest

from chatbot.settings import Settings
from memory.engine import MemoryEngine
from memory.fusion import LEXICAL_WEIGHT, METHODS, fuse
from memory.lexical import LexicalIndex, analyse, tokens
from memory.store import Sentence
from models.embedders import NgramEmbedder
from models.errors import InputError

CAT = "사용자의 고양이 이름은 나비다"
DOG = "사용자의 강아지 이름은 초코다"
JOB = "사용자는 2026년 3월에 판교의 게임 회사로 이직했다"
MEMORY = [CAT, DOG, JOB, "사용자는 주말마다 북한산에 오른다", "사용자는 매운 음식을 못 먹는다"]


def _commit(engine: MemoryEngine, uid: int, texts: list[str]) -> None:
    latest = engine.current(uid)
    engine.commit(
        uid,
        [Sentence(t) for t in texts],
        base=latest.number if latest else None,
        strategy="import",
        status="ok",
        author="import",
    )


def _engine(store, method: str) -> MemoryEngine:
    return MemoryEngine(store, NgramEmbedder(), method=method)


def test_words_are_kiwi_lemmas_with_dates_kept_whole_and_function_words_left_out():
    assert tokens("고양이들이 귀여워서 키우고 싶어") == ["고양이", "귀엽", "키우"]
    words = tokens("지난 5월 3일에 Caroline and I went to the Museum 博物館")
    assert {"5월", "3일", "carolin", "museum", "博物館", "went"} <= set(words)  # English words by their stems
    assert not {"and", "i", "the", "to", "월", "일"} & set(words)
    names = {w for w, name in analyse("민수랑 Caroline이 2023년에 부산 갔어") if name}
    assert {"민수", "carolin", "부산", "2023년"} <= names
    # a question meets its evidence in another form of the word: "paint" in "painted", "camping" in "camp"
    assert set(tokens("What did Caroline paint?")) & set(tokens("Caroline painted a sunset")) == {"carolin", "paint"}
    assert set(tokens("Melanie went camping with her kids")) & set(tokens("Where did Melanie camp?")) >= {"camp"}
    for nothing in ("", "   ", "?!...", "😀😀🎉", "ㅋㅋㅋㅋ"):
        assert tokens(nothing) == []


def test_bm25_ranks_the_sentence_sharing_a_rare_word_first_and_scores_nothing_shared_zero():
    index = LexicalIndex(MEMORY)
    scores = index.scores(tokens("판교 회사 다니는 거 어때?"))
    assert scores.shape == (len(MEMORY),) and int(np.argmax(scores)) == 2 and scores[2] > 0
    assert np.count_nonzero(scores) == 1
    assert not index.scores(tokens("우주선 타고 싶다")).any()
    assert not index.scores([]).any()
    assert "판교" in index.vocabulary and "사용자" not in index.vocabulary  # STOP words are not indexed
    assert not LexicalIndex([]).scores(["고양이"]).size
    assert not LexicalIndex(["?!", "😀"]).scores(["고양이"]).any()  # sentences with no word at all


def test_hybrid_adds_a_bounded_boost_and_keeps_the_dense_order_where_no_word_is_shared():
    dense = np.array([0.9, 0.5, 0.4, 0.1], dtype=np.float32)
    assert list(fuse("hybrid", dense, np.zeros(4))) == pytest.approx(list(dense))
    fused = fuse("hybrid", dense, np.array([0.0, 0.0, 8.0, 2.0]))
    assert fused[2] == pytest.approx(0.4 + LEXICAL_WEIGHT) and fused[3] == pytest.approx(0.1 + LEXICAL_WEIGHT / 4)
    assert fused[0] == pytest.approx(0.9)  # the boost never exceeds LEXICAL_WEIGHT: it reorders near ties only
    assert list(fuse("lexical", dense, np.array([0.0, 1.0, 3.0, 0.0]))) == [0.0, 1.0, 3.0, 0.0]
    assert list(fuse("dense", dense, np.array([9.0, 9.0, 9.0, 9.0]))) == pytest.approx(list(dense))


def test_each_method_finds_what_it_should_and_lexical_alone_finds_only_shared_words(store):
    uid = store.users.get_or_create("minsu")
    _commit(_engine(store, "dense"), uid, MEMORY)
    for method in METHODS:
        hits = _engine(store, method).search(uid, "요즘 판교 회사 생활은 어때?", k=2)
        assert hits[0].text == JOB, method
    lexical = _engine(store, "lexical").search(uid, "우주선 타고 싶다", k=5)
    assert [h.score for h in lexical] == [0.0] * 5  # nothing shared: no sentence is preferred


def test_the_lexical_index_follows_every_version_and_every_forget(store):
    uid = store.users.get_or_create("minsu")
    engine = _engine(store, "lexical")
    _commit(engine, uid, MEMORY)
    entry = engine.index.entry(uid, store.versions.latest_id(uid), lambda: store.versions.latest(uid))
    assert entry.lexical is not None and "판교" in entry.lexical.vocabulary  # built with the version, not at a turn
    _commit(engine, uid, [CAT, DOG, "사용자는 2026년 9월에 제주로 이사했다"])
    assert engine.search(uid, "판교", k=1)[0].score == 0.0
    assert engine.search(uid, "제주 생활은 어때?", k=1)[0].text.endswith("제주로 이사했다")
    assert _engine(store, "hybrid").search(uid, "판교", k=3)[0].score < 1  # another process's engine too
    latest = engine.index.entry(uid, store.versions.latest_id(uid), lambda: store.versions.latest(uid)).lexical
    _commit(engine, uid, [CAT, DOG, "사용자는 2026년 9월에 제주로 이사했다", "사용자는 요즘 수영을 배운다"])
    now = engine.index.entry(uid, store.versions.latest_id(uid), lambda: store.versions.latest(uid)).lexical
    assert latest is not None and now is not None and len(now.words) == 4
    # the three sentences the new version kept were not read by Kiwi again: their words are the last version's
    assert sum(now.words[t] is latest.words.get(t) for t in now.words) == 3
    engine.forget_sentence(uid, CAT)
    [cached] = [engine.index.entry(uid, store.versions.latest_id(uid), lambda: store.versions.latest(uid))]
    assert cached.lexical is not None
    assert not {"고양이", "나비"} & cached.lexical.vocabulary  # the forgotten sentence left the BM25 index too
    assert not any("고양이" in text for text in [*cached.lexical.words, *cached.known])  # nor the words kept for reuse
    assert all(h.text != CAT for h in engine.search(uid, "고양이 나비", k=5))
    engine.forget(uid)
    assert engine.index.cached_users() == []
    assert engine.search(uid, "고양이", k=5) == []


def test_the_earlier_turns_tell_which_one_a_vague_message_means(store):
    uid = store.users.get_or_create("minsu")
    _commit(_engine(store, "dense"), uid, MEMORY)

    def lead(engine: MemoryEngine, context: list[str]) -> float:
        """How far the cat's sentence leads the dog's for a message that names neither."""
        scores = {h.text: h.score for h in engine.search(uid, "걔 이름 뭐였더라?", k=5, context=context)}
        return scores[CAT] - scores[DOG]

    for method in ("dense", "hybrid"):
        engine = _engine(store, method)
        alone = lead(engine, [])
        assert lead(engine, ["우리 강아지가 계속 짖어"]) < alone < lead(engine, ["우리 고양이가 밥을 안 먹어"]), method
    hybrid = _engine(store, "hybrid")
    assert hybrid.search(uid, "걔 이름 뭐였더라?", k=1, context=["우리 강아지가 계속 짖어"])[0].text == DOG
    assert hybrid.search(uid, "걔 이름 뭐였더라?", k=1, context=["우리 고양이가 밥을 안 먹어"])[0].text == CAT


@pytest.mark.parametrize("method", METHODS)
def test_any_text_is_a_query_and_an_empty_memory_answers_nothing(store, method):
    engine = _engine(store, method)
    uid = store.users.get_or_create("minsu")
    assert engine.search(uid, "고양이 잘 있어?") == []
    _commit(engine, uid, MEMORY)
    queries = [
        "",
        "?!?!... ...",
        "😀🎉🔥👍",
        "ㅋㅋㅋㅋㅋㅋ",
        "고양이 " * 4_000 + "나비 판교 " * 2_000,  # a 20,000-character paste
        "我的猫 나비는 good cat이야, 博物館에서 Caroline 만났어 2026年",
    ]
    assert len(queries[4]) >= 20_000
    for query in queries:
        hits = engine.search(uid, query, k=3, context=["😀", "", query])
        assert len(hits) == 3 and {h.text for h in hits} <= set(MEMORY)
    assert engine.pinned(uid, queries[4], token_budget=10)[0] is not None


def test_the_method_is_a_setting_checked_where_it_enters():
    assert Settings.load(env={}).retrieval == "hybrid"
    assert Settings.load(env={"KEEM_RETRIEVAL": "dense"}).retrieval == "dense"
    with pytest.raises(InputError, match="KEEM_RETRIEVAL"):
        Settings.load(env={"KEEM_RETRIEVAL": "bm25"})
    with pytest.raises(InputError, match="retrieval method"):
        MemoryEngine.__init__(object.__new__(MemoryEngine), None, NgramEmbedder(), method="bm25")  # type: ignore[arg-type]
