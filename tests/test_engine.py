"""The memory engine: embeddings stored beside text, FAISS kept in step, budgets, user isolation."""

from __future__ import annotations

import itertools

import numpy as np

from memory.store import Sentence


def _commit(engine, uid, texts):
    return engine.commit(
        uid,
        [Sentence(t) for t in texts],
        base=latest.number if (latest := engine.current(uid)) else None,
        strategy="import",
        status="ok",
        author="import",
    )


def test_commit_stores_float32_vectors_and_reuses_unchanged_ones(engine, store):
    uid = store.users.get_or_create("minsu")
    v1 = _commit(engine, uid, ["사용자는 고양이를 키운다", "사용자는 서울에 산다"])
    blob = store.db.execute("select embedding from memory_sentences where id = ?", [v1.sentences[0].id]).fetchone()[0]
    assert len(blob) == engine.embedder.dim * 4
    calls = []
    original = engine.embedder.embed
    engine.embedder.embed = lambda texts: calls.append(list(texts)) or original(texts)
    _commit(engine, uid, ["사용자는 고양이를 키운다", "사용자는 부산으로 이사했다"])
    assert calls == [["사용자는 부산으로 이사했다"]]


def test_index_follows_every_commit(engine, store):
    uid = store.users.get_or_create("minsu")
    _commit(engine, uid, ["사용자는 고양이를 키운다"])
    assert engine.search(uid, "고양이")[0].text == "사용자는 고양이를 키운다"
    _commit(engine, uid, ["사용자는 강아지를 입양했다"])
    hits = engine.search(uid, "강아지", k=5)
    assert [h.text for h in hits] == ["사용자는 강아지를 입양했다"]


def test_top_k_unless_the_whole_memory_fits_the_budget(engine, store):
    uid = store.users.get_or_create("minsu")
    texts = [f"사용자는 취미 {i}번을 좋아한다" for i in range(10)]
    _commit(engine, uid, texts)
    assert len(engine.search(uid, "취미", k=3)) == 3
    hits = engine.search(uid, "취미 7번", k=3, token_budget=10_000)
    assert len(hits) == 10 and hits[0].text == texts[7]
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert len(engine.search(uid, "취미", k=3, token_budget=5)) == 3


def test_one_users_memory_is_never_returned_for_another(engine, store):
    a, b = store.users.get_or_create("a"), store.users.get_or_create("b")
    _commit(engine, a, ["사용자는 비밀 프로젝트를 한다"])
    _commit(engine, b, ["사용자는 요리를 좋아한다"])
    for query in ("비밀 프로젝트", "요리"):
        assert {h.text for h in engine.search(b, query, k=10)} == {"사용자는 요리를 좋아한다"}
    assert engine.search(store.users.get_or_create("c"), "비밀") == []


def test_index_is_rebuilt_from_sqlite_by_a_fresh_engine(engine, store):
    from memory.engine import MemoryEngine

    uid = store.users.get_or_create("minsu")
    _commit(engine, uid, ["사용자는 테니스를 친다", "사용자는 회사원이다"])
    fresh = MemoryEngine(store, engine.embedder)
    assert fresh.search(uid, "테니스", k=1)[0].text == "사용자는 테니스를 친다"
    assert np.isclose(fresh.search(uid, "테니스", k=1)[0].score, engine.search(uid, "테니스", k=1)[0].score)


def test_least_recently_searched_index_is_evicted_and_rebuilt_on_demand(store):
    from memory.engine import MemoryEngine
    from models.embedders import NgramEmbedder

    engine = MemoryEngine(store, NgramEmbedder())
    engine.index.max_users = 1
    a, b = store.users.get_or_create("a"), store.users.get_or_create("b")
    _commit(engine, a, ["사용자는 테니스를 친다"])
    _commit(engine, b, ["사용자는 피아노를 친다"])
    assert engine.index.cached_users() == [b]  # a, least recently searched, went
    assert engine.search(a, "테니스", k=1)[0].text == "사용자는 테니스를 친다"
    assert engine.search(b, "피아노", k=1)[0].text == "사용자는 피아노를 친다"
