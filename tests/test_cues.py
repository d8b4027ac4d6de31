"""Memory cues: the update model's cue words become a second search view that carries over between versions."""

from __future__ import annotations

from memory.cues import CueWriter, parse_cues
from memory.engine import MemoryEngine
from memory.jobs import JobRunner
from memory.store import Sentence, Store
from memory.updaters import make_updater
from models.embedders import NgramEmbedder
from models.errors import GenerationError
from models.fake import ScriptedChatModel, stage_of

WEEKEND = "사용자는 남편이 지방으로 발령이 나서 주말부부로 지낸다"
FLOWERS = "사용자는 동네에서 작은 꽃집을 운영한다"
QUERY = "금요일 밤마다 KTX 타고 오는 사람 기다리는 게 일이야"
# NgramEmbedder(dim=4096) is lexical and collision-light: the query shares a cue's words, not the sentence's.


class CountingEmbedder(NgramEmbedder):
    """The n-gram embedder, recording every text it is asked to embed."""

    def __init__(self):
        super().__init__(dim=4096)
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen.extend(texts)
        return super().embed(texts)


def test_parse_cues_reads_numbered_lines_and_drops_the_rest():
    reply = (
        "1: KTX, 금요일 밤, 기차역, KTX\n"
        "설명: 이런 식으로 씁니다\n"
        "2. 카네이션 / 꽃다발 · 어버이날\n"
        "7: 범위 밖\n"
        "1: 두 번째 1번은 무시\n"
        "3: , ,"
    )
    assert parse_cues(reply, 3) == {0: ["KTX", "금요일 밤", "기차역"], 1: ["카네이션", "꽃다발", "어버이날"]}
    assert parse_cues("I cannot help with that.", 2) == {}
    assert parse_cues("1: 기차\ufffd, 역", 1) == {0: ["기차", "역"]}  # a token cut mid-character


def test_cue_words_already_in_the_sentence_are_dropped():
    model = ScriptedChatModel(["1: 주말부부, KTX, 남편\n2: 꽃집, 운영"])
    assert CueWriter(model).write([WEEKEND, FLOWERS]) == {WEEKEND: "KTX"}


def test_cue_writer_asks_in_batches_and_maps_cues_to_their_sentences():
    texts = [f"사용자는 취미 {i}번을 좋아한다" for i in range(25)]
    model = ScriptedChatModel(
        responder=lambda messages: "\n".join(
            f"{i}: 단어{i}" for i in range(1, messages[-1]["content"].count("번을 좋아한다") + 1)
        )
    )
    cues = CueWriter(model).write(texts)
    assert len(model.calls) == 2  # 20 + 5
    assert cues[texts[0]] == "단어1" and cues[texts[24]] == "단어5"
    assert "1. 사용자는 취미 20번을 좋아한다" in model.calls[1][-1]["content"]


def test_a_cue_lets_search_find_a_paraphrase_and_survives_reload(tmp_path):
    store = Store(tmp_path / "m.db")
    engine = MemoryEngine(store, NgramEmbedder(dim=4096))
    uid = store.users.get_or_create("a")
    engine.commit(
        uid, [Sentence(WEEKEND), Sentence(FLOWERS)], base=None, strategy="import", status="ok", author="import"
    )
    plain = {h.text: h.score for h in engine.search(uid, QUERY, k=2)}
    engine.commit(
        uid,
        [Sentence(WEEKEND), Sentence(FLOWERS)],
        {WEEKEND: "KTX, 금요일 밤, 기차역, 기다림"},
        base=1,
        strategy="import",
        status="ok",
        author="import",
    )
    hits = engine.search(uid, QUERY, k=2)
    assert hits[0].text == WEEKEND and hits[0].score > plain[WEEKEND]
    assert [h.text for h in hits].count(WEEKEND) == 1  # one hit per sentence, by its better view
    fresh = MemoryEngine(Store(tmp_path / "m.db"), NgramEmbedder(dim=4096))  # a restart rebuilds from SQLite
    assert fresh.search(uid, QUERY, k=1)[0].text == WEEKEND
    assert fresh.current(uid).sentences[0].cues == "KTX, 금요일 밤, 기차역, 기다림"


def test_unchanged_sentences_keep_their_cues_without_re_embedding(store):
    embedder = CountingEmbedder()
    engine = MemoryEngine(store, embedder)
    uid = store.users.get_or_create("a")
    engine.commit(
        uid, [Sentence(WEEKEND)], {WEEKEND: "KTX, 기차역"}, base=None, strategy="import", status="ok", author="import"
    )
    embedder.seen.clear()
    version = engine.commit(
        uid, [Sentence(WEEKEND, "kept"), Sentence(FLOWERS)], base=1, strategy="import", status="ok", author="import"
    )
    assert version.sentences[0].cues == "KTX, 기차역" and version.sentences[1].cues is None
    assert embedder.seen == [FLOWERS]


def _ended_session(store, text):
    uid = store.users.get_or_create("a")
    sid = store.sessions.start(uid, "accumulate", "fake")
    store.turns.add(sid, uid, "user", text)
    store.sessions.end(sid)
    return uid, store.queue.enqueue(uid, sid, "accumulate")


def _responder(cue_reply):
    def answer(messages):
        prompt = messages[-1]["content"]
        if "낱말" in prompt:  # the cues prompt
            if isinstance(cue_reply, BaseException):
                raise cue_reply
            return cue_reply
        return WEEKEND + "."  # the summary

    return answer


def test_update_job_writes_cues_for_new_sentences_when_enabled(store):
    engine = MemoryEngine(store, NgramEmbedder(dim=4096))
    uid, job = _ended_session(store, "남편이 지방 발령 나서 이제 주말부부야")
    model = ScriptedChatModel(responder=_responder("1: KTX, 금요일 밤, 기차역"))
    runner = JobRunner(engine, lambda s: make_updater(s, model), cue_writer=CueWriter(model))
    stages = []
    version = runner.run(job, stages.append)
    assert "cues" in stages and version.details["cues"]["asked"] == version.details["cues"]["written"] == 1
    assert version.details["cues"]["prompt_hash"]
    assert version.sentences[0].cues == "KTX, 금요일 밤, 기차역"
    assert engine.search(uid, QUERY, k=1)[0].text == version.sentences[0].text


def test_a_failed_cue_call_costs_the_cues_not_the_update(store):
    engine = MemoryEngine(store, NgramEmbedder(dim=4096))
    _uid, job = _ended_session(store, "남편이 지방 발령 나서 이제 주말부부야")
    model = ScriptedChatModel(responder=_responder(GenerationError("server went away")))
    version = JobRunner(engine, lambda s: make_updater(s, model), cue_writer=CueWriter(model)).run(job)
    assert version is not None and version.sentences[0].cues is None
    assert "server went away" in version.details["cues"]["error"]
    assert store.queue.get(job)["status"] == "done"


def test_cues_are_off_unless_asked_for(store):
    engine = MemoryEngine(store, NgramEmbedder(dim=4096))
    _uid, job = _ended_session(store, "남편이 지방 발령 나서 이제 주말부부야")
    model = ScriptedChatModel(responder=_responder("1: KTX"))
    version = JobRunner(engine, lambda s: make_updater(s, model)).run(job)
    asked = [stage_of(call[-1]["content"]) for call in model.calls]
    assert asked == ["summarize", "emotions"] and "cues" not in version.details  # no cue call


def test_a_database_from_before_cues_is_migrated(tmp_path):
    """A store written by the first schema gains the cue columns and keeps its memory."""
    from sqlite_utils import Database

    from memory.store.migrations import schema

    path = tmp_path / "old.db"
    db = Database(path)
    schema.migrations.apply(db, stop_before="m002_memory_cues")
    db["users"].insert({"id": 1, "name": "a", "created_at": "2024-01-01T00:00:00+00:00"})
    db["memory_versions"].insert(
        {
            "id": 1,
            "user_id": 1,
            "number": 1,
            "strategy": "import",
            "status": "ok",
            "author": "import",
            "created_at": "2024-01-01T00:00:00+00:00",
        }
    )
    db["memory_sentences"].insert(
        {"version_id": 1, "user_id": 1, "position": 0, "text": FLOWERS, "provenance": "imported"}
    )
    db.conn.close()
    store = Store(path)
    assert {"cues", "cue_embedding"} <= {c.name for c in store.db["memory_sentences"].columns}
    version = store.versions.latest(1)
    assert version.texts == [FLOWERS] and version.sentences[0].cues is None
    engine = MemoryEngine(store, NgramEmbedder(dim=4096))
    assert engine.search(1, "꽃집", k=1)[0].text == FLOWERS


def test_concurrent_jobs_sharing_one_cue_writer_each_get_only_their_own_problems():
    """The update pool runs jobs in threads with one CueWriter: a job whose cue answers are cut at their budget
    records that, and no other job's record shows it, however the calls interleave; nothing carries over from one
    job to the next."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    def answer(messages):
        prompt = messages[-1]["content"]
        time.sleep(0.005)  # let the other jobs' calls interleave with this one
        if "잘리는" in prompt:  # this job's answers run past any budget: cut, retried, cut again
            return "1: " + ", ".join(f"낱말{i}" for i in range(2000))
        return "\n".join(f"{n}: KTX, 금요일 밤" for n in range(1, prompt.count("번을 좋아한다") + 1))

    model = ScriptedChatModel(responder=answer)
    runner = JobRunner(MemoryEngine(Store(":memory:"), NgramEmbedder()), lambda s: make_updater(s, model))
    runner.cue_writer = CueWriter(model)
    start = threading.Barrier(8)

    def job(i: int) -> list[dict]:
        start.wait(timeout=10)
        texts = [f"사용자는 {'잘리는 ' if i % 2 else ''}취미 {i}번과 {j}번을 좋아한다" for j in range(i + 1)]
        return [runner.write_cues([], [Sentence(t) for t in texts])[1]["cues"] for _round in range(2)]

    with ThreadPoolExecutor(8) as pool:
        reports = list(pool.map(job, range(8)))
    for i, rounds in enumerate(reports):
        for report in rounds:
            budget = 48 * (i + 1)  # TOKENS_PER_SENTENCE per sentence: names this job's call
            if i % 2:
                assert report["written"] == 0 and report["problems"] == [
                    f"cues: answer cut at {budget} tokens, retried with {budget * 2}",
                    f"cues: answer cut at {budget * 2} tokens; not used",
                ], (i, report)
            else:
                assert report["written"] == i + 1 and "problems" not in report, (i, report)
