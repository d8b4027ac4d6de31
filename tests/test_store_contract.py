"""The store's contract, on SQLite and on Postgres (`store_url`): every promise holds the same on both engines.

Ids are never reused; a commit states its base and concurrent writers (threads with stores of their own, as separate
processes would have) lose no update; an update job is leased to one claimer and taken over when its lease runs out;
forgetting leaves no row of the user; migrations are recorded and a newer database is refused; bad URLs are one line
with the fix. The Postgres half needs a server in the PG* environment (`make test` brings one with pg_virtualenv).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chatbot.study_records import records
from chatbot.study_records import schema as trial_schema
from memory.store import Sentence, Store
from memory.store.connection import Connection, describe
from memory.store.migrations import schema
from memory.store.postgres import redact, translate
from memory.store.queue import process_owner
from models.errors import JobTakenError, MemoryChangedError, MigrationError, StorageError, UserForgottenError


def _count(store: Store, table: str, where: str = "", params: tuple = ()) -> int:
    row = store.one(f"select count(*) as n from {table} {where}", list(params))
    assert row is not None
    return int(row["n"])


def test_migrations_are_recorded_and_rerun_cleanly(store_url):
    store = Store(store_url)
    records(store)
    expected = schema.names if store.dialect == "sqlite" else [n for n, _ in schema.postgres]
    assert store.applied(schema) == expected
    trials = trial_schema.names if store.dialect == "sqlite" else [n for n, _ in trial_schema.postgres]
    assert store.applied(trial_schema) == trials
    assert {"sessions", "consents", "answers", "emotion_records"} <= set(store.tables_with("user_id"))
    store.close()
    again = Store(store_url)  # nothing applied twice
    records(again)
    assert again.applied(schema) == expected
    again.close()


def test_processes_opening_a_new_database_at_once_migrate_it_once(store_url):
    """Several app processes (threads with stores of their own here) start on one new database together."""
    opened: list[Store] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait()
        try:
            store = Store(store_url)
            records(store)
            opened.append(store)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == 4
    expected = schema.names if opened[0].dialect == "sqlite" else [n for n, _ in schema.postgres]
    assert opened[0].applied(schema) == expected
    for store in opened:
        store.close()


def test_a_database_a_newer_keem_wrote_is_refused(store_url):
    store = Store(store_url)
    with store.write():
        if store.dialect == "sqlite":
            store.db["_sqlite_migrations"].insert({"migration_set": "keem", "name": "m999_future", "applied_at": "x"})
        else:
            store.execute("insert into keem_migrations values ('keem', 'pg999_future', 'x')")
    store.close()
    with pytest.raises(MigrationError, match="newer keem") as refused:
        Store(store_url)
    assert refused.value.code == "migration_newer"


def test_ids_are_never_reused_after_a_user_is_forgotten(any_store):
    store = any_store
    first = store.users.get_or_create("a")
    session = store.sessions.start(first, "keem", "fake")
    turn = store.turns.add(session, first, "user", "안녕")
    version = store.versions.commit(
        first, [Sentence("사용자는 학생이다")], base=None, strategy="import", status="ok", author="import"
    )
    job = store.queue.enqueue(first, session, "keem")
    before = store.users.generation()
    store.erasure.forget_user(first)
    assert store.users.generation() == before + 1  # every process's caches see the forget
    second = store.users.get_or_create("a")  # the same name again: a new person, new ids
    s2 = store.sessions.start(second, "keem", "fake")
    assert second > first and s2 > session and store.turns.add(s2, second, "user", "x") > turn
    v2 = store.versions.commit(
        second, [Sentence("새 사람")], base=None, strategy="import", status="ok", author="import"
    )
    assert v2.id > version.id and v2.sentences[0].id > version.sentences[0].id
    assert store.queue.enqueue(second, s2, "keem") > job
    with pytest.raises(UserForgottenError):
        store.turns.add(session, first, "user", "늦은 메시지")  # the old tab's session is gone, not someone else's


def test_vectors_and_texts_round_trip_exactly(any_store):
    store = any_store
    uid = store.users.get_or_create("민수")
    vector = np.arange(8, dtype=np.float32) / 3
    v = store.versions.commit(
        uid,
        [Sentence("사용자는 100% 확신한다 '따옴표' ?", embedding=vector, embedder="ngram", sources={"turns": [1]})],
        base=None,
        strategy="import",
        status="ok",
        author="import",
    )
    got = store.versions.latest(uid).sentences[0]
    assert got.text == "사용자는 100% 확신한다 '따옴표' ?" and got.sources == {"turns": [1]}
    assert got.embedding is not None and np.array_equal(got.embedding, vector) and v.id == store.versions.latest_id(uid)
    assert store.one("select id from users where name like ?", ["민%"])["id"] == uid  # a % in a query survives


def test_concurrent_writers_lose_no_update_and_stale_updates_are_refused(store_url):
    """Four writers, each with a store of its own, add sentences to one user's memory from the version they read:
    every commit is rebased onto what the others wrote meanwhile, so all 24 sentences end in the latest version."""
    Store(store_url).close()
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        store = Store(store_url)
        try:
            uid = store.users.get_or_create("shared")
            barrier.wait()
            for i in range(6):
                latest = store.versions.latest(uid)
                texts = [*(latest.texts if latest else []), f"작성자 {n}의 {i}번째 문장"]
                kept = list(latest.sentences) if latest else []
                new = [Sentence(t, "kept", s.id) for t, s in zip(texts, kept)] + [Sentence(texts[-1], "user")]
                store.versions.commit(
                    uid, new, base=latest.number if latest else None, strategy="user", status="ok", author="user"
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = Store(store_url)
    uid = store.users.require("shared")
    latest = store.versions.latest(uid)
    assert latest.number == 24 and len(set(latest.texts)) == 24  # no lost update, no duplicate
    assert [v.number for v in store.versions.of_user(uid)] == list(range(1, 25))
    # an update computed from an old version after another update is refused, not written over it
    store.versions.commit(uid, [Sentence("업데이트")], base=24, strategy="keem", status="ok", author="updater")
    with pytest.raises(MemoryChangedError) as refused:
        store.versions.commit(uid, [Sentence("낡은 업데이트")], base=24, strategy="keem", status="ok", author="updater")
    assert refused.value.code == "memory_recompute"
    store.close()


def test_one_job_goes_to_one_claimer_and_an_expired_lease_is_taken_over(store_url):
    first = Store(store_url)
    uid = first.users.get_or_create("minsu")
    job = first.queue.enqueue(uid, first.sessions.start(uid, "keem", "fake"), "keem")
    stores = [Store(store_url) for _ in range(4)]
    barrier, won = threading.Barrier(len(stores)), []

    def race(i: int, store: Store) -> None:
        barrier.wait()
        if store.queue.claim(owner=f"other-host:{i}", lease_s=60) is not None:
            won.append(i)

    threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert first.queue.requeue_running() == 0 and first.queue.claim(job) is None  # leased: nobody takes it
    with first.write():
        first.execute("update update_jobs set lease_until = ? where id = ?", [time.time() - 1, job])  # it hung
    taken = first.queue.claim(owner=process_owner())
    assert taken["id"] == job and taken["owner"] == process_owner() and taken["attempts"] == 2
    assert taken["takeovers"] == 1 and taken["taken_from"] == f"other-host:{won[0]} (its lease ran out)"
    hung, was = stores[won[0]], f"other-host:{won[0]}"  # it wakes: every write it tries for the job is refused
    with pytest.raises(JobTakenError, match=f"update job {job} is no longer this process's"):
        hung.queue.set_stage(job, "update", owner=was)
    with pytest.raises(JobTakenError):
        hung.queue.finish_without_version(job, "skipped", owner=was)
    assert hung.queue.fail(job, "GenerationError: late", retry_in_s=30, owner=was) is False
    with pytest.raises(JobTakenError):
        hung.versions.commit(
            uid,
            [Sentence("늦은 복사본")],
            base=None,
            strategy="keem",
            status="ok",
            author="updater",
            job_id=job,
            owner=was,
        )
    now = first.queue.get(job)
    assert (now["status"], now["owner"], now["stage"]) == ("running", process_owner(), "queued")
    assert now["last_error"] is None
    assert first.versions.of_user(uid) == []
    first.queue.set_stage(job, "update")  # its owner carries on
    committed = first.versions.commit(
        uid, [Sentence("학생")], base=None, strategy="keem", status="ok", author="updater", job_id=job
    )
    again = stores[won[0]].versions.commit(
        uid, [Sentence("학생")], base=None, strategy="keem", status="ok", author="updater", job_id=job
    )
    assert again.id == committed.id and len(first.versions.of_user(uid)) == 1  # the hung worker's commit: one version
    for s in (first, *stores):
        s.close()


def test_forgetting_leaves_no_row_of_the_user_in_any_table(any_store):
    store = any_store
    trial = records(store)
    keep, gone = store.users.get_or_create("keep"), store.users.get_or_create("gone")
    for uid in (keep, gone):
        sid = store.sessions.start(uid, "keem", "fake")
        turn = store.turns.add(sid, uid, "user", f"{uid} 비밀 이야기")
        store.versions.commit(
            uid, [Sentence("사용자는 학생이다")], base=None, strategy="import", status="ok", author="import"
        )
        store.versions.emotions.opened(uid, sid, "k1", turn)
        store.versions.emotions.opened(uid, sid, "k2", turn)  # the upsert: one opening per session
        store.queue.enqueue(uid, sid, "keem")
        trial.record_consent(uid, "s1", "hash")
        store.sessions.end(sid)
        trial.save_answers(sid, uid, "s1", {"q1": 3})
    erased = store.erasure.forget_user(gone)
    assert erased.counts["turns"] == 1 and erased.counts["other"] >= 3  # openings, consents, answers
    for table in store.tables_with("user_id"):
        if table != "erasures":
            assert _count(store, table, "where user_id = ?", (gone,)) == 0, table
    for table in ("sessions", "turns", "memory_versions", "memory_sentences", "update_jobs", "consents", "answers"):
        assert _count(store, table, "where user_id = ?", (keep,)) >= 1, table  # the other user keeps everything
    assert _count(store, "session_openings", "where user_id = ?", (keep,)) == 1
    audit = store.erasure.audit(gone)
    assert [a["kind"] for a in audit] == ["user"] and "비밀" not in str(audit)


def test_a_sentence_erasure_redacts_its_turns_on_both_engines(any_store):
    store = any_store
    uid = store.users.get_or_create("u")
    sid = store.sessions.start(uid, "keem", "fake")
    turn = store.turns.add(sid, uid, "user", "나 부산으로 이사했어")
    v = store.versions.commit(
        uid,
        [Sentence("사용자는 부산에 산다"), Sentence("사용자는 학생이다")],
        base=None,
        strategy="import",
        status="ok",
        author="import",
    )
    lineage = store.erasure.lineage(uid, ["사용자는 부산에 산다"])
    store.erasure.forget_sentences(uid, lineage, [turn])
    assert store.versions.get(uid, v.number).texts == ["사용자는 학생이다"]
    assert [t["text"] for t in store.turns.of_session(sid)] == ["[삭제됨]"]
    assert store.one("select count(*) as n from turns where text like ?", ["%부산%"])["n"] == 0


def test_an_erased_sentence_and_its_turns_leave_no_copy_in_the_database(store_url, tmp_path):
    """The engine's "이 내용을 완전히 지우기" on either engine: on Postgres a pg_dump after it holds none of the text
    (tests/test_erasure.py scans SQLite's files byte by byte)."""
    import shutil
    import subprocess

    from tests.erasure_world import EARLIER, ECHO, KEPT, PHONE, SAID, SECRET, lived

    store, engine, uid = lived(tmp_path, store_url)
    erased = engine.forget_sentence(uid, SECRET)
    assert erased.counts == {"memory_sentences": 3, "memory_versions": 3, "turns": 2}
    assert [v.texts for v in store.versions.of_user(uid)] == [[], [], [KEPT]]
    for table, column in (("turns", "text"), ("memory_sentences", "text"), ("memory_versions", "details")):
        assert store.one(f"select count(*) as n from {table} where {column} like ?", [f"%{PHONE}%"])["n"] == 0
    if store.dialect == "postgres":
        dump = shutil.which("pg_dump")
        if dump is None:
            pytest.skip("pg_dump is not installed")
        dumped = subprocess.run([dump, "--dbname", store_url], capture_output=True, text=True, timeout=60)
        assert dumped.returncode == 0 and KEPT in dumped.stdout
        assert not [t for t in (PHONE, SECRET, EARLIER, SAID, ECHO) if t in dumped.stdout]
    store.close()


def test_on_postgres_a_forget_leaves_no_byte_of_the_user_in_table_or_index_pages(pg_url):
    """pageinspect reads the raw 8 kB pages of the tables and the user-name index: after a forget none holds the
    user's words (plain VACUUM would leave them in the page's free space; the erasure rewrites the tables)."""
    import psycopg

    store = Store(pg_url)
    keep = store.users.get_or_create("keeper")
    store.turns.add(store.sessions.start(keep, "keem", "fake"), keep, "user", "평범한 이야기")
    gone = store.users.get_or_create("zebra-walker")  # inserted last: its bytes sit where plain VACUUM leaves them
    store.turns.add(store.sessions.start(gone, "keem", "fake"), gone, "user", "SECRET-4417 나의 비밀")
    pages = psycopg.connect(pg_url, autocommit=True)
    try:
        pages.execute("create extension if not exists pageinspect")
    except psycopg.Error as exc:
        pytest.skip(f"pageinspect is not available here ({exc})")

    def holding() -> list[str]:
        found = []
        for relation in ("turns", "users", "sessions", "idx_users_name"):
            count = pages.execute("select pg_relation_size(%s) / 8192", [relation]).fetchone()[0]
            for page in range(count):
                raw = pages.execute("select get_raw_page(%s, %s)", [relation, page]).fetchone()[0]
                found += [f"{relation}:{page}" for word in (b"SECRET-4417", b"zebra-walker") if word in raw]
        return found

    assert holding()  # the scan finds what is there
    # another session's transaction began before the forget (another app process mid-request): the deleted rows
    # are visible to it, so a VACUUM FULL meanwhile would copy them into the new files; the erasure waits for it
    reader = psycopg.connect(pg_url)
    reader.execute("set transaction isolation level repeatable read")
    assert reader.execute("select count(*) from turns").fetchone()[0] == 2
    threading.Timer(1.0, reader.commit).start()
    store.erasure.forget_user(gone)
    reader.close()
    assert holding() == []
    assert [t["text"] for t in store.rows("select text from turns")] == ["평범한 이야기"]
    pages.close()
    store.close()


def test_on_postgres_a_writer_held_too_long_is_a_storage_error_not_a_hang(pg_url, monkeypatch):
    from memory.store import postgres

    monkeypatch.setattr(postgres, "WRITE_WAIT_S", 1)
    holder, waiter = Store(pg_url), Store(pg_url)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.write():  # a hung process in the middle of a write
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:
        with pytest.raises(StorageError, match="for writing for 1 s") as refused:
            waiter.users.get_or_create("minsu")
        assert refused.value.code == "storage_postgres"
    finally:
        release.set()
        thread.join()
    assert waiter.users.get_or_create("minsu") > 0  # once it is free, writes go on
    holder.close()
    waiter.close()


def test_a_study_rule_holds_across_concurrent_writers(store_url):
    """A check-then-insert inside write() (one consent per text, answers submitted once) admits one writer."""
    Store(store_url).close()
    stores = [Store(store_url) for _ in range(4)]
    uid = stores[0].users.get_or_create("p1")
    sid = stores[0].sessions.start(uid, "keem", "fake")
    stores[0].turns.add(sid, uid, "user", "안녕")
    stores[0].sessions.end(sid)
    barrier, saved, refused = threading.Barrier(4), [], []

    def submit(store: Store) -> None:
        barrier.wait()
        records(store).record_consent(uid, "s1", "hash")
        try:
            saved.append(records(store).save_answers(sid, uid, "s1", {"q1": 4}))
        except Exception as exc:
            refused.append(getattr(exc, "code", exc))

    threads = [threading.Thread(target=submit, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert saved == [1] and refused == ["questionnaire_done"] * 3
    assert _count(stores[0], "consents") == 1
    for s in stores:
        s.close()


def ping_until_heard(store: Store, heard: list[str]) -> None:
    """Notify "ping" until the listener heard one: its LISTEN is in place (Postgres; SQLite hears nothing)."""
    deadline = time.monotonic() + 10
    while store.dialect == "postgres" and not heard and time.monotonic() < deadline:
        with store.write():
            store.notify("keem_test", "ping")
        time.sleep(0.1)


def test_a_notification_reaches_another_process_only_when_its_write_commits(store_url):
    """The cache-eviction hint: NOTIFY on Postgres (sent at commit, never for a rollback); nothing on SQLite."""
    store, other = Store(store_url), Store(store_url)
    heard: list[str] = []
    listener = threading.Thread(target=lambda: heard.extend(p for _, p in other.listen(["keem_test"], timeout=1.0)))
    listener.start()
    ping_until_heard(store, heard)
    with pytest.raises(RuntimeError), store.write():
        store.notify("keem_test", "rolled back")
        raise RuntimeError
    with store.write():
        store.notify("keem_test", "user:7")
    listener.join()
    assert (set(heard), "rolled back" in heard) == (
        ({"ping", "user:7"} if store.dialect == "postgres" else set()),
        False,
    )
    store.close()
    other.close()


def test_a_listener_that_keeps_running_hears_every_notification_across_its_timeouts(store_url):
    """The worker listens until it stops, waking every `timeout` to check: one connection throughout, so a forget
    notified between two timeouts is never missed (listening anew after each timeout lost what came meanwhile)."""
    store, other = Store(store_url), Store(store_url)
    heard: list[str] = []
    stop = threading.Event()
    listener = threading.Thread(
        target=lambda: heard.extend(p for _, p in other.listen(["keem_test"], 0.05, running=lambda: not stop.is_set()))
    )
    listener.start()
    ping_until_heard(store, heard)
    sent = [f"user:{i}" for i in range(40)]
    for payload in sent:  # across some 20 of the listener's timeouts
        with store.write():
            store.notify("keem_test", payload)
        time.sleep(0.05)
    time.sleep(0.3)
    stop.set()
    listener.join(5)
    assert not listener.is_alive()  # it ends once told, within a timeout
    assert [p for p in heard if p != "ping"] == (sent if store.dialect == "postgres" else [])
    store.close()
    other.close()


# -- bad input ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["mysql://root:hunter2@localhost/keem", "postgresql:/root:hunter2@localhost/keem", "sqlite:hunter2.db"]
)
def test_an_unknown_scheme_is_one_line_with_the_fix_and_makes_no_file(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError) as refused:
        Store(url)
    message = str(refused.value)
    assert refused.value.code == "storage_scheme" and "\n" not in message
    assert "postgresql://" in message and "hunter2" not in message
    assert list(tmp_path.iterdir()) == []  # no folder "mysql:" with the password in its path


def test_an_unreachable_postgres_is_one_line_without_the_password(tmp_path, monkeypatch):
    pytest.importorskip("psycopg")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError) as refused:
        Store("postgresql://keem:s3cret-pw@127.0.0.1:1/keem")
    message = str(refused.value)
    assert refused.value.code == "storage_postgres" and "\n" not in message
    assert "s3cret-pw" not in message and "keem:***@127.0.0.1:1/keem" in message and "KEEM_DB" in message
    assert list(tmp_path.iterdir()) == []


def test_sqlite_snapshots_are_refused_for_postgres_with_what_to_use_instead(tmp_path):
    from memory.backup import open_store
    from models.errors import InputError

    with pytest.raises(InputError, match="pg_dump") as refused:  # before any connection is tried
        open_store("postgresql://keem:hunter2@127.0.0.1:1/keem", str(tmp_path / "backups"))
    assert "KEEM_BACKUP_DIR" in str(refused.value) and "hunter2" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_urls_are_redacted_and_queries_translated():
    assert redact("postgresql://u:p%40ss@h:5/db?sslmode=require&password=x") == (
        "postgresql://u:***@h:5/db?sslmode=require&password=***"
    )
    assert describe("postgresql://u@h/db") == "postgresql://u@h/db" and describe("a/b.db") == "a/b.db"
    assert translate("select * from t where a = ? and b like '%?%' and c = ?") == (
        "select * from t where a = %s and b like '%%?%%' and c = %s"
    )


def test_the_sqlite_driver_is_not_reachable_on_postgres(any_store):
    if any_store.dialect == "sqlite":
        assert any_store.db.table_names()
    else:
        with pytest.raises(AttributeError, match=r"store\.rows/one/execute"):
            any_store.db.execute("select 1")


def test_the_sqlite_store_keeps_its_path_and_a_folder_is_refused(tmp_path):
    with pytest.raises(StorageError) as refused:
        Connection(tmp_path, schema)
    assert refused.value.code == "storage_folder"
    assert Path(tmp_path).is_dir()
