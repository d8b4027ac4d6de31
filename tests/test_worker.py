"""The update worker's pool: several users' updates at once, one user's in order, one at a time."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from chatbot.worker import Worker, pool_size
from memory.store import Store
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


class SlowUpdates(ScriptedChatModel):
    """Every update call takes 0.2 s; records how many users' calls overlap, and whether one user's ever do."""

    def __init__(self):
        super().__init__(
            responder=lambda msgs: (
                "통과" if "새 기억이 올바른지" in msgs[-1]["content"] else "사용자는 요가를 시작했다."
            )
        )
        self.lock, self.active, self.most, self.same_user_overlap = threading.Lock(), [], 0, False

    def stream(self, messages, options=None):
        user = next((name for name in ("민수", "지우", "서연") if name in messages[-1]["content"]), None)
        with self.lock:
            self.same_user_overlap |= user in self.active
            self.active.append(user)
            self.most = max(self.most, len(self.active))
        time.sleep(0.2)
        with self.lock:
            self.active.remove(user)
        return (yield from super().stream(messages, options or __import__("models").GenerationOptions()))


def updating(store: Store, model: ScriptedChatModel, **settings: Any) -> Chatbot:
    """A bot whose memory updates go to `model`, on the test's store."""
    return Chatbot(
        Settings(db=store.path, **settings),
        chat_model=ScriptedChatModel(responder=lambda m: "응"),
        update_model=model,
        embedder=NgramEmbedder(),
        store=store,
    )


def test_updates_of_several_users_run_at_once_and_one_users_in_order(store):
    model = SlowUpdates()
    bot = updating(store, model, update_workers=3)
    worker = Worker(bot)
    assert pool_size(bot) == 3
    jobs = []
    for name in ("민수", "지우", "서연", "민수"):
        session = bot.start(name)
        list(session.send(f"나 {name}인데 요가를 시작했어"))
        jobs.append(worker.end(session))
    assert worker.run_pending() == 4
    assert all(store.queue.get(j)["status"] == "done" for j in jobs)
    assert model.most >= 2 and not model.same_user_overlap  # users at once; one user's updates never
    minsu = store.versions.of_user(store.users.find("민수"))
    assert [v.session_id for v in minsu] == [
        store.queue.get(jobs[0])["session_id"],
        store.queue.get(jobs[3])["session_id"],
    ]
    worker.stop()


def test_a_model_in_this_process_gets_one_update_at_a_time(store):
    """Three users' updates waiting at once, as above, but no KEEM_UPDATE_WORKERS and a model in this process:
    no two model calls ever overlap (the test above shows the same jobs overlapping with a pool of 3)."""
    model = SlowUpdates()
    bot = updating(store, model)
    worker = Worker(bot)
    jobs = []
    for name in ("민수", "지우", "서연"):
        session = bot.start(name)
        list(session.send(f"나 {name}인데 요가를 시작했어"))
        jobs.append(worker.end(session))
    assert worker.run_pending() == 3
    assert all(store.queue.get(j)["status"] == "done" for j in jobs)
    assert model.most == 1  # one update call at a time, across users
    worker.stop()


def test_beside_other_app_processes_a_start_ends_only_the_sessions_silent_past_the_timeout(store):
    """KEEM_WORKER=off (several processes on one store): another process's live session is not ended by this one's
    start; one silent past the idle timeout is (its process died), and its update is queued. Alone on the store, a
    start ends every open session, as after a crash."""
    bot = Chatbot(
        Settings(), chat_model=ScriptedChatModel(responder=lambda m: "응"), embedder=NgramEmbedder(), store=store
    )
    user_id = store.users.get_or_create("minsu")
    live = store.sessions.start(user_id, "keem", "scripted")
    store.turns.add(live, user_id, "user", "나 이사했어")
    shared = Worker(bot, shared=True, run_jobs=False, idle_timeout_s=3600)
    assert shared.end_abandoned() == []
    assert Worker(bot, shared=True, run_jobs=False, idle_timeout_s=0).end_abandoned() == [live]
    assert [j["session_id"] for j in store.queue.jobs()] == [live]
    other = store.sessions.start(user_id, "keem", "scripted")
    assert Worker(bot, run_jobs=False, idle_timeout_s=3600).end_abandoned("restart") == [other]  # alone: every one


class HeldUpdates(SlowUpdates):
    """Each update call waits until `go` is set: a model call under way when its worker stops."""

    def __init__(self):
        super().__init__()
        self.go, self.called = threading.Event(), threading.Event()

    def stream(self, messages, options=None):
        self.called.set()
        self.go.wait(30)
        return (yield from super().stream(messages, options))


def test_a_job_running_when_its_worker_stops_is_pending_again_for_the_next_worker_at_once(store):
    """A worker stopped in the middle of an update (a deploy, its grace spent) releases the job: pending again,
    counted as taken from it, so the next worker takes it at once, here or on another machine (where no dead pid
    tells), not when its lease runs out. The copy still running writes nothing more: no stage, no version. Before,
    the job stayed 'running' under a live owner for the lease's 15 minutes (an app restarted in one process)."""
    model = HeldUpdates()
    bot = updating(store, model)
    worker = Worker(bot)
    session = bot.start("민수")
    list(session.send("나 요가를 시작했어"))
    job = worker.end(session)
    assert worker.dispatch() == 1 and model.called.wait(10)  # its update is in its first model call
    worker.stop()
    left = store.queue.get(job)
    assert (left["status"], left["owner"], left["takeovers"]) == ("pending", None, 1)
    assert left["taken_from"].endswith("(its worker stopped before it ended)")
    model.go.set()
    worker.pool.shutdown(wait=True)  # the stopped worker's copy ends: it found the job no longer its own
    assert store.queue.get(job)["status"] == "pending" and store.versions.of_user(session.user_id) == []
    again = Worker(bot)
    assert again.run_pending() == 1
    done = store.queue.get(job)
    assert (done["status"], done["attempts"]) == ("done", 2) and len(store.versions.of_user(session.user_id)) == 1
    again.stop()
