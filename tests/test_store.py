"""The SQLite store: migrations, versions, the job queue, forgetting."""

from __future__ import annotations

import pytest

from memory.migrations import migrations
from memory.store import Sentence, Store, process_owner
from models.errors import MigrationError, UnknownUserError, UpdateError
from tests.conftest import dead_owner


def test_migrations_build_the_schema_from_an_empty_database_and_rerun_cleanly(tmp_path):
    path = tmp_path / "new.db"
    store = Store(path)
    tables = set(store.db.table_names())
    assert {"users", "sessions", "turns", "memory_versions", "memory_sentences", "update_jobs"} <= tables
    assert [m.name for m in migrations.applied(store.db)] == [m.name for m in migrations._migrations]
    assert store.db.execute("pragma journal_mode").fetchone()[0] == "wal"
    store.close()
    Store(path).close()  # reopening applies nothing twice


def test_a_database_from_a_newer_keem_is_refused(tmp_path):
    store = Store(tmp_path / "k.db")
    store.db["_sqlite_migrations"].insert({"migration_set": "keem", "name": "m999_future", "applied_at": "x"})
    store.close()
    with pytest.raises(MigrationError, match="newer keem"):
        Store(tmp_path / "k.db")


def test_versions_number_up_and_never_commit_empty(store):
    uid = store.get_or_create_user("minsu")
    assert store.get_or_create_user("minsu") == uid
    v1 = store.commit_version(
        uid, [Sentence("사용자는 고양이를 키운다")], strategy="import", status="ok", author="import"
    )
    v2 = store.commit_version(
        uid,
        [Sentence("사용자는 고양이를 키운다", "kept", v1.sentences[0].id), Sentence("사용자는 부산에 산다")],
        strategy="keem",
        status="ok",
        author="updater",
    )
    assert (v1.number, v2.number) == (1, 2) and store.latest_version(uid).texts == v2.texts
    with pytest.raises(UpdateError, match="empty"):
        store.commit_version(uid, [], strategy="keem", status="ok", author="updater")
    with pytest.raises(UpdateError):
        store.commit_version(uid, [Sentence("  ")], strategy="keem", status="ok", author="updater")
    assert [v.number for v in store.versions(uid)] == [1, 2]


def test_job_queue_claims_fails_retries_and_requeues_after_a_crash(store):
    uid = store.get_or_create_user("minsu")
    sid = store.start_session(uid, "keem", "fake")
    job = store.enqueue_job(uid, sid, "keem")
    assert store.enqueue_job(uid, sid, "keem") == job  # one job per session
    claimed = store.claim_job()
    assert claimed["id"] == job and claimed["status"] == "running" and claimed["attempts"] == 1
    assert claimed["owner"] == process_owner()
    assert store.claim_job() is None
    assert store.requeue_running() == 0  # this process is alive: its job stays its own
    store.fail_job(job, "boom", retry_in_s=60)
    assert store.job(job)["status"] == "pending" and store.claim_job() is None  # backing off
    assert store.claim_job(job)["attempts"] == 2  # named explicitly, it runs now
    store.fail_job(job, "boom", retry_in_s=None)
    assert store.job(job)["status"] == "failed" and store.job(job)["last_error"] == "boom"
    assert store.retry_jobs() == [job] and store.job(job)["status"] == "pending" and store.job(job)["attempts"] == 0
    store.claim_job(owner=dead_owner())  # a process that then died
    assert store.requeue_running() == 1 and store.job(job)["status"] == "pending"


def test_a_job_another_process_runs_is_never_taken_until_its_lease_runs_out(tmp_path):
    import threading

    path = tmp_path / "shared.db"
    first = Store(path)
    uid = first.get_or_create_user("minsu")
    job = first.enqueue_job(uid, first.start_session(uid, "keem", "fake"), "keem")
    stores = [Store(path) for _ in range(6)]  # six processes racing for one job
    barrier, won = threading.Barrier(len(stores)), []

    def race(i: int, store: Store) -> None:
        barrier.wait()
        if store.claim_job(owner=f"{process_owner()}-{i}", lease_s=60) is not None:
            won.append(i)

    threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert first.requeue_running() == 0 and first.claim_job(job) is None  # alive and leased: nobody else takes it
    first.db.execute("update update_jobs set lease_until = 0 where id = ?", [job])  # its process hung
    assert first.claim_job(job)["owner"] == process_owner()
    for s in (first, *stores):
        s.close()


def test_a_job_committed_twice_makes_one_version(store):
    uid = store.get_or_create_user("minsu")
    job = store.enqueue_job(uid, store.start_session(uid, "keem", "fake"), "keem")
    store.claim_job(job)
    one = store.commit_version(
        uid, [Sentence("사용자는 학생이다")], strategy="keem", status="ok", author="updater", job_id=job
    )
    two = store.commit_version(
        uid, [Sentence("사용자는 학생이다")], strategy="keem", status="ok", author="updater", job_id=job
    )
    assert one.id == two.id and [v.number for v in store.versions(uid)] == [1]


def test_forget_deletes_everything_of_one_user_only(store):
    a, b = store.get_or_create_user("a"), store.get_or_create_user("b")
    for uid in (a, b):
        sid = store.start_session(uid, "keem", "fake")
        store.add_turn(sid, uid, "user", "안녕")
        store.enqueue_job(uid, sid, "keem")
        store.commit_version(uid, [Sentence("사용자는 학생이다")], strategy="import", status="ok", author="import")
    store.delete_user(a)
    with pytest.raises(UnknownUserError, match="keem session --user a"):
        store.require_user("a")
    for table in ("sessions", "turns", "memory_versions", "memory_sentences", "update_jobs"):
        assert store.db.execute(f"select count(*) from {table} where user_id = ?", [a]).fetchone()[0] == 0
        assert store.db.execute(f"select count(*) from {table} where user_id = ?", [b]).fetchone()[0] == 1


def test_two_processes_writing_one_database_wait_for_each_other(tmp_path):
    """The app and the CLI share a file: concurrent writers must queue, never fail with 'database is locked'."""
    import threading

    path = tmp_path / "shared.db"
    Store(path).close()
    errors: list[Exception] = []

    def writer(name: str) -> None:
        store = Store(path)  # its own connection, as another process would have
        try:
            uid = store.get_or_create_user(name)
            for i in range(25):
                sid = store.start_session(uid, "keem", "fake")
                store.add_turn(sid, uid, "user", f"{name} {i}")
                store.enqueue_job(uid, sid, "keem")
                store.claim_job()
                store.commit_version(
                    uid, [Sentence(f"사용자는 {i}번째로 말했다")], strategy="import", status="ok", author="import"
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
    assert [len(store.versions(store.require_user(f"u{n}"))) for n in range(4)] == [25] * 4
