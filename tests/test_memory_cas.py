"""Memory versions are compare-and-swap: every writer states the version it started from, and nothing written since
is lost (memory/store/rebase.py). Real concurrent callers: the app's worker thread running an update while the
memory tab edits, and two runners with their own Store connections to one file."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from chatbot.web.chat import ChatUI
from chatbot.web.messages import korean_error
from chatbot.web.state import UserState
from chatbot.worker import Worker
from memory.diff import version_diff
from memory.engine import MemoryEngine
from memory.jobs import JobRunner
from memory.store import Sentence, Store, note
from memory.updaters import make_updater
from memory.updaters.base import carry_over
from models.embedders import NgramEmbedder
from models.errors import InputError, MemoryChangedError
from models.fake import ScriptedChatModel, stage_of
from tests.cas_world import CAT, JOB, NEWS, SEOUL, SWIM, Gate, _v1, updater_answer


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


BUSAN = "사용자는 서울에 살다가 부산으로 이사했다."
PIANO = "사용자는 요즘 피아노를 배운다."
SWIM_USER = "사용자는 평일 아침에 수영을 한다."
SWIM_UPDATE = "사용자는 주말마다 수영을 하며 대회를 준비한다."


# -- the rule, one writer after another --------------------------------------------------------------------------


def test_an_update_on_a_stale_base_keeps_the_users_deletion_edit_and_addition(engine, store):
    uid = store.users.get_or_create("민수")
    v1 = _v1(engine, uid)
    seoul, cat, swim, job = v1.sentences
    mine = carry_over([seoul, job]) + [Sentence(SWIM_USER, "user", swim.id), Sentence(PIANO, "user")]
    engine.commit(uid, mine, base=1, strategy="user", status="ok", author="user")  # the memory tab, meanwhile
    update = [  # computed from v1: it rewrites Seoul and swimming, keeps the cat, adds news
        Sentence(BUSAN, "rewritten", seoul.id),
        *carry_over([cat]),
        Sentence(SWIM_UPDATE, "rewritten", swim.id),
        *carry_over([job]),
        Sentence(NEWS, "added"),
    ]
    v3 = engine.commit(uid, update, base=1, strategy="keem", status="ok", author="updater")
    assert v3.number == 3 and v3.texts == [BUSAN, SWIM_USER, JOB, NEWS, PIANO]
    assert v3.details["base"] == 1
    assert v3.details["rebase"] == {
        "onto": 2,
        "user_deletions_kept": 1,
        "user_edits_kept": 1,
        "user_additions_kept": 1,
    }
    assert v3.notes == (note("rebased_update", onto=2),)
    diff = version_diff(store.versions.get(uid, 2), v3)  # the update's own changes, on top of the user's
    assert diff.rewritten == [(SEOUL, BUSAN)] and diff.added == [NEWS] and diff.removed == []
    assert {h.text for h in engine.search(uid, "고양이 나비", k=10)} == set(v3.texts)  # the cat stays deleted
    assert CAT not in {h.text for h in MemoryEngine(store, engine.embedder).search(uid, "고양이", k=10)}


def test_an_update_after_another_update_is_refused_so_it_is_recomputed(engine, store):
    uid = store.users.get_or_create("민수")
    v1 = _v1(engine, uid)
    engine.commit(
        uid, [*carry_over(v1.sentences), Sentence(NEWS)], base=1, strategy="keem", status="ok", author="updater"
    )
    with pytest.raises(MemoryChangedError) as refused:
        engine.commit(uid, carry_over(v1.sentences[:2]), base=1, strategy="keem", status="ok", author="updater")
    assert refused.value.code == "memory_recompute" and "compute it again" in str(refused.value)
    assert [v.number for v in store.versions.of_user(uid)] == [1, 2]


def test_a_users_stale_change_is_replayed_when_it_still_applies_else_refused(engine, store):
    """Two tabs showing version 1: the second tab's edit of the sentence the first changed is refused with a Korean
    notice; its deletion of another sentence, and its addition, apply on top of the first tab's version."""
    uid = store.users.get_or_create("민수")
    v1 = _v1(engine, uid)
    seoul, _cat, swim, job = v1.sentences
    first = carry_over(v1.sentences)
    first[0] = Sentence(BUSAN, "user", seoul.id)
    engine.commit(uid, first, base=1, strategy="user", status="ok", author="user")
    stale_edit = carry_over(v1.sentences)
    stale_edit[0] = Sentence("사용자는 대구에 산다.", "user", seoul.id)
    with pytest.raises(MemoryChangedError) as refused:
        engine.commit(uid, stale_edit, base=1, strategy="user", status="ok", author="user")
    assert refused.value.code == "memory_changed" and "다시 불러왔으니" in korean_error(refused.value)
    stale_delete = carry_over([seoul, swim, job])
    v3 = engine.commit(uid, stale_delete, base=1, strategy="user", status="ok", author="user")
    assert v3.texts == [BUSAN, SWIM, JOB] and v3.details["rebase"]["onto"] == 2
    v4 = engine.commit(
        uid, [*carry_over(v1.sentences), Sentence(PIANO, "user")], base=1, strategy="user", status="ok", author="user"
    )
    assert v4.texts == [BUSAN, SWIM, JOB, PIANO]  # an addition always applies; the stale list brings nothing back
    with pytest.raises(InputError, match="no memory version 9"):
        engine.commit(uid, [Sentence(PIANO)], base=9, strategy="user", status="ok", author="user")


# -- real concurrent callers ---------------------------------------------------------------------------------------


def _ended_session(store: Store, uid: int, text: str = "다음 달에 제주도 여행 가!") -> int:
    sid = store.sessions.start(uid, "keem", "fake")
    store.turns.add(sid, uid, "user", text)
    store.turns.add(sid, uid, "assistant", "좋겠네요!")
    store.sessions.end(sid)
    return store.queue.enqueue(uid, sid, "keem")


def _wait_done(store: Store, job_id: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = store.queue.get(job_id)
        if job["status"] in ("done", "failed") or job["last_error"]:
            return job
        time.sleep(0.05)
    raise AssertionError("the update job did not finish")


@pytest.mark.parametrize("change", ["delete", "edit", "add"])
def test_a_change_in_the_memory_tab_while_the_update_runs_holds_after_it_commits(tmp_path: Path, change: str) -> None:
    gate = Gate()
    model = ScriptedChatModel(responder=updater_answer(gate))
    bot = Chatbot(Settings(db=str(tmp_path / "keem.db")), chat_model=model, embedder=NgramEmbedder())
    worker = Worker(bot, poll_s=0.05).start()
    try:
        ui = ChatUI(bot, worker)
        state: UserState = ui.entry.login("민수").state
        _v1(bot.engine, state.user_id)
        job = _ended_session(bot.store, state.user_id)
        worker.notify()
        gate.entered.wait(timeout=20)  # the update read version 1 and is inside its model call now
        if change == "delete":
            ui.memory.delete_sentence("1:1", state)  # the cat
        elif change == "edit":
            ui.memory.edit_sentence("1:2", SWIM_USER, state)
        else:
            ui.memory.add_sentence(PIANO, state)
        assert bot.engine.current(state.user_id).number == 2
        gate.release.set()
        done = _wait_done(bot.store, job)
        assert done["status"] == "done", done["last_error"]
        latest = bot.engine.current(state.user_id)
        assert latest.number == 3 and latest.author == "updater" and NEWS in latest.texts
        assert latest.details["base"] == 1 and latest.details["rebase"]["onto"] == 2
        expected = {
            "delete": [SEOUL, SWIM, JOB, NEWS],
            "edit": [SEOUL, CAT, SWIM_USER, JOB, NEWS],
            "add": [SEOUL, CAT, SWIM, JOB, NEWS, PIANO],
        }[change]
        assert latest.texts == expected
        for engine in (bot.engine, MemoryEngine(Store(tmp_path / "keem.db"), NgramEmbedder())):  # cache and file
            found = {h.text for h in engine.search(state.user_id, "고양이 수영 피아노", k=20)}
            assert found == set(expected)
    finally:
        gate.release.set()
        worker.stop()


def test_two_updates_of_one_user_racing_make_one_version_each_the_second_on_the_first(tmp_path: Path) -> None:
    """Two runners (the app and `keem jobs run`, say), each with its own connection to one file, start from
    version 1 at once: one commits version 2, the other computes again from it and commits version 3."""
    path = tmp_path / "keem.db"
    setup = Store(path)
    uid = setup.users.get_or_create("민수")
    _v1(MemoryEngine(setup, NgramEmbedder()), uid)
    jobs = [_ended_session(setup, uid, "제주도 여행 가!"), _ended_session(setup, uid, "피아노 배우기 시작했어.")]
    gate = Gate(parties=2)
    facts = iter(["사용자는 제주도 여행을 계획하고 있다.", "사용자는 요즘 피아노를 배운다."])
    lock = threading.Lock()

    def summary(messages: list[dict[str, Any]]) -> str:
        if stage_of(messages[-1]["content"]) == "emotions":  # the records step after each update: none recorded
            return "없음"
        gate.wait()
        with lock:
            return next(facts, "사용자는 다시 이야기했다.")

    errors: list[BaseException] = []

    def run(job_id: int) -> None:
        store = Store(path)  # its own connection, as another process would have
        try:
            engine = MemoryEngine(store, NgramEmbedder())
            model = ScriptedChatModel(responder=summary)
            JobRunner(engine, lambda s: make_updater("accumulate", model, engine.embedder)).run(job_id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    gate.entered.wait(timeout=20)  # both are computing from version 1
    gate.release.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    v1, v2, v3 = setup.versions.of_user(uid)
    assert (v2.author, v3.author) == ("updater", "updater")
    assert v2.details["base"] == 1 and v3.details["base"] == 2 and v3.details["recomputed"] == 1
    assert set(v2.texts) < set(v3.texts) and set(v1.texts) < set(v2.texts)  # nothing of the first is lost
    assert sorted(setup.queue.get(j)["version_id"] for j in jobs) == [v2.id, v3.id]
    setup.close()


def test_keem_memory_import_in_another_process_while_an_update_runs_is_kept(tmp_path: Path) -> None:
    """The CLI beside the app: its import commits while the app's update is inside its model call; the update then
    commits on top, with the imported sentences in it."""
    import subprocess
    import sys

    path = tmp_path / "keem.db"
    store = Store(path)
    engine = MemoryEngine(store, NgramEmbedder())
    uid = store.users.get_or_create("민수")
    _v1(engine, uid)
    job = _ended_session(store, uid)
    gate = Gate()
    model = ScriptedChatModel(responder=updater_answer(gate))
    runner = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder))
    thread = threading.Thread(target=runner.run, args=(job,))
    thread.start()
    try:
        gate.entered.wait(timeout=20)
        (tmp_path / "mem.txt").write_text(f"{PIANO}\n", encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "chatbot.cli.main", "memory", "import", "--user", "민수", "--db", str(path)]
            + ["--embedder", "ngram", str(tmp_path / "mem.txt")],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    finally:
        gate.release.set()
        thread.join(120)  # the update's commit after the gate: 30 s ran out once on a machine at load average 25
    assert not thread.is_alive(), "the update did not finish"
    v1, v2, v3 = store.versions.of_user(uid)
    assert (v2.author, v2.texts) == ("import", [*v1.texts, PIANO])
    assert v3.author == "updater" and v3.texts == [*v1.texts, NEWS, PIANO] and v3.details["rebase"]["onto"] == 2
    assert store.queue.get(job)["version_id"] == v3.id
    store.close()


def test_an_update_that_drops_a_sentence_the_user_edited_keeps_the_edit(engine, store):
    """What the update drops goes, unless the user changed it meanwhile: the user's edit is theirs to undo."""
    uid = store.users.get_or_create("민수")
    v1 = _v1(engine, uid)
    seoul, _cat, swim, job = v1.sentences
    mine = carry_over(v1.sentences)
    mine[2] = Sentence(SWIM_USER, "user", swim.id)
    engine.commit(uid, mine, base=1, strategy="user", status="ok", author="user")
    dropped = carry_over([seoul, job])  # computed from v1: the cat and swimming are gone
    v3 = engine.commit(uid, dropped, base=1, strategy="operations", status="ok", author="updater")
    assert v3.texts == [SEOUL, JOB, SWIM_USER] and v3.details["rebase"]["user_edits_kept"] == 1
