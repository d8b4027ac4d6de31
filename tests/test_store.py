"""The store: migrations, versions, the job queue, forgetting (most of it on SQLite and on Postgres)."""

from __future__ import annotations

import time

import pytest

from chatbot.web.messages import korean_error
from memory.store import Sentence, Store
from memory.store.migrations import schema
from memory.store.queue import Queue, process_owner
from models.errors import InputError, MigrationError, UnknownUserError, UpdateError
from tests.conftest import dead_owner


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


def test_migrations_build_the_schema_from_an_empty_database_and_rerun_cleanly(tmp_path):
    path = tmp_path / "new.db"
    store = Store(path)
    tables = set(store.db.table_names())
    assert {"users", "sessions", "turns", "memory_versions", "memory_sentences", "update_jobs"} <= tables
    assert schema.applied(store.db) == schema.names
    assert store.db.execute("pragma journal_mode").fetchone()[0] == "wal"
    store.close()
    Store(path).close()  # reopening applies nothing twice


def test_a_database_from_a_newer_keem_is_refused(tmp_path):
    store = Store(tmp_path / "k.db")
    store.db["_sqlite_migrations"].insert({"migration_set": "keem", "name": "m999_future", "applied_at": "x"})
    store.close()
    with pytest.raises(MigrationError, match="newer keem") as refused:
        Store(tmp_path / "k.db")
    assert "upgrade keem-chat" in str(refused.value)  # the fix, in English; the page says it in Korean by its code
    assert korean_error(refused.value).startswith("서버의 데이터베이스를 더 새로운 버전의 keem이 썼습니다")


def test_versions_number_up_and_never_commit_empty(store):
    uid = store.users.get_or_create("minsu")
    assert store.users.get_or_create("minsu") == uid
    v1 = store.versions.commit(
        uid, [Sentence("사용자는 고양이를 키운다")], base=None, strategy="import", status="ok", author="import"
    )
    v2 = store.versions.commit(
        uid,
        [Sentence("사용자는 고양이를 키운다", "kept", v1.sentences[0].id), Sentence("사용자는 부산에 산다")],
        base=v1.number,
        strategy="keem",
        status="ok",
        author="updater",
    )
    assert (v1.number, v2.number) == (1, 2) and store.versions.latest(uid).texts == v2.texts
    with pytest.raises(UpdateError, match="empty"):
        store.versions.commit(uid, [], base=2, strategy="keem", status="ok", author="updater")
    with pytest.raises(UpdateError):
        store.versions.commit(uid, [Sentence("  ")], base=2, strategy="keem", status="ok", author="updater")
    assert [v.number for v in store.versions.of_user(uid)] == [1, 2]


def test_job_queue_claims_fails_retries_and_requeues_after_a_crash(store):
    uid = store.users.get_or_create("minsu")
    sid = store.sessions.start(uid, "keem", "fake")
    job = store.queue.enqueue(uid, sid, "keem")
    assert store.queue.enqueue(uid, sid, "keem") == job  # one job per session
    claimed = store.queue.claim()
    assert claimed["id"] == job and claimed["status"] == "running" and claimed["attempts"] == 1
    assert claimed["owner"] == process_owner()
    assert store.queue.claim() is None
    assert store.queue.requeue_running() == 0  # this process is alive: its job stays its own
    store.queue.fail(job, "boom", retry_in_s=60)
    assert store.queue.get(job)["status"] == "pending" and store.queue.claim() is None  # backing off
    assert store.queue.claim(job)["attempts"] == 2  # named explicitly, it runs now
    store.queue.fail(job, "boom", retry_in_s=None)
    assert store.queue.get(job)["status"] == "failed" and store.queue.get(job)["last_error"] == "boom"
    assert (
        store.queue.retry() == [job]
        and store.queue.get(job)["status"] == "pending"
        and store.queue.get(job)["attempts"] == 0
    )
    assert store.queue.get(job)["takeovers"] == 0  # failures and retries are no takeover
    dead = dead_owner()
    store.queue.claim(owner=dead)  # a process that then died
    assert store.queue.requeue_running() == 1 and store.queue.get(job)["status"] == "pending"
    assert store.queue.get(job)["takeovers"] == 1 and store.queue.get(job)["taken_from"] == (
        f"{dead} (its process was gone)"
    )


def test_retry_also_runs_a_job_waiting_in_its_backoff_but_a_restart_keeps_the_backoff(store):
    """`keem jobs retry` and the memory tab's retry take a job whose attempt failed and waits for its retry time;
    the start of the app (`resume`) leaves that time as it is."""
    uid = store.users.get_or_create("minsu")
    waiting = store.queue.enqueue(uid, store.sessions.start(uid, "keem", "fake"), "keem")
    fresh = store.queue.enqueue(uid, store.sessions.start(uid, "keem", "fake"), "keem")  # never tried: not a retry
    store.queue.claim(waiting)
    store.queue.fail(waiting, "GenerationError: server down", retry_in_s=600)
    assert store.queue.claim() is not None and store.queue.get(fresh)["status"] == "running"  # the fresh one
    assert [Queue.retryable(j) for j in store.queue.jobs(uid)] == [True, False]
    assert store.queue.retry(backoff=False) == []  # what a start does (JobRunner.resume)
    assert store.queue.get(waiting)["next_attempt_at"] > time.time() + 500  # a restart keeps the backoff
    assert store.queue.retry(user_id=uid) == [waiting]
    job = store.queue.get(waiting)
    assert job["status"] == "pending" and job["attempts"] == 0 and job["next_attempt_at"] is None
    assert store.queue.claim()["id"] == waiting  # runs now, not in ten minutes


def test_a_job_another_process_runs_is_never_taken_until_its_lease_runs_out(store_url):
    import threading

    path = store_url
    first = Store(path)
    uid = first.users.get_or_create("minsu")
    job = first.queue.enqueue(uid, first.sessions.start(uid, "keem", "fake"), "keem")
    stores = [Store(path) for _ in range(6)]  # six processes racing for one job
    barrier, won = threading.Barrier(len(stores)), []

    def race(i: int, store: Store) -> None:
        barrier.wait()
        if store.queue.claim(owner=f"{process_owner()}-{i}", lease_s=60) is not None:
            won.append(i)

    threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert (
        first.queue.requeue_running() == 0 and first.queue.claim(job) is None
    )  # alive and leased: nobody else takes it
    with first.write():
        first.execute("update update_jobs set lease_until = 0 where id = ?", [job])  # its process hung
    assert first.queue.claim(job)["owner"] == process_owner()
    for s in (first, *stores):
        s.close()


def test_a_job_committed_twice_makes_one_version(store):
    uid = store.users.get_or_create("minsu")
    job = store.queue.enqueue(uid, store.sessions.start(uid, "keem", "fake"), "keem")
    store.queue.claim(job)
    one = store.versions.commit(
        uid, [Sentence("사용자는 학생이다")], base=None, strategy="keem", status="ok", author="updater", job_id=job
    )
    two = store.versions.commit(
        uid, [Sentence("사용자는 학생이다")], base=None, strategy="keem", status="ok", author="updater", job_id=job
    )
    assert one.id == two.id and [v.number for v in store.versions.of_user(uid)] == [1]


def test_forget_deletes_everything_of_one_user_only(store):
    a, b = store.users.get_or_create("a"), store.users.get_or_create("b")
    for uid in (a, b):
        sid = store.sessions.start(uid, "keem", "fake")
        store.turns.add(sid, uid, "user", "안녕")
        store.queue.enqueue(uid, sid, "keem")
        store.versions.commit(
            uid, [Sentence("사용자는 학생이다")], base=None, strategy="import", status="ok", author="import"
        )
    store.users.delete(a)
    with pytest.raises(UnknownUserError, match="keem session --user a"):
        store.users.require("a")
    for table in ("sessions", "turns", "memory_versions", "memory_sentences", "update_jobs"):
        assert store.one(f"select count(*) as n from {table} where user_id = ?", [a])["n"] == 0
        assert store.one(f"select count(*) as n from {table} where user_id = ?", [b])["n"] == 1


def test_two_processes_writing_one_database_wait_for_each_other(store_url):
    """The app and the CLI share a file: concurrent writers must queue, never fail with 'database is locked'."""
    import threading

    path = store_url
    Store(path).close()
    errors: list[Exception] = []

    def writer(name: str) -> None:
        store = Store(path)  # its own connection, as another process would have
        try:
            uid = store.users.get_or_create(name)
            for i in range(25):
                sid = store.sessions.start(uid, "keem", "fake")
                store.turns.add(sid, uid, "user", f"{name} {i}")
                store.queue.enqueue(uid, sid, "keem")
                store.queue.claim()
                store.versions.commit(
                    uid,
                    [Sentence(f"사용자는 {i}번째로 말했다")],
                    base=i or None,
                    strategy="import",
                    status="ok",
                    author="import",
                )
        except Exception as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(f"u{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = Store(path)
    assert [len(store.versions.of_user(store.users.require(f"u{n}"))) for n in range(4)] == [25] * 4
    store.close()


def test_replies_carry_their_mark_and_a_replaced_one_leaves_the_dialogue_but_stays_stored(store):
    uid = store.users.get_or_create("민수")
    sid = store.sessions.start(uid, "keem", "fake")
    asked = store.turns.add(sid, uid, "user", "안녕")
    stopped = store.turns.add(sid, uid, "assistant", "안녕하", reply_to=asked, mark="stopped")
    with pytest.raises(InputError, match="unknown reply mark"):
        store.turns.add(sid, uid, "assistant", "x", reply_to=asked, mark="deleted")
    store.turns.replace(asked, sid, uid)  # only a reply can be replaced: the user's turn stays as it is
    store.turns.replace(stopped, sid, uid)
    store.turns.add(sid, uid, "assistant", "안녕하세요!", reply_to=asked)
    assert [(t["text"], t["mark"]) for t in store.turns.of_session(sid)] == [("안녕", None), ("안녕하세요!", None)]
    assert [t["mark"] for t in store.turns.of_session(sid, replaced=True)] == [None, "replaced", None]
    store.sessions.end(sid)
    assert [(p["id"], p["turns"], p["first"]) for p in store.sessions.past(uid)] == [(sid, 2, "안녕")]
