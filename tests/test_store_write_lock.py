"""Waiting for SQLite's write lock (memory/store/connection.py `Connection._begin_immediate`), with real processes:
writers of one file all get through and lose nothing, a writer blocked by another process's open write transaction
goes on once it ends, and one that waits past the deadline gets a clear error (storage_busy: what holds the lock and
to try again), not SQLite's bare "database is locked"."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from chatbot.web.messages import korean_error
from memory.store import Store, connection
from models.errors import StorageError
from tests.procs import hold_write_lock, python

WRITER = """
import sys, time
from memory.store import Store
store = Store(sys.argv[1])
user = store.users.get_or_create(sys.argv[2])
session = store.sessions.start(user, "keem", "test")
stop = time.monotonic() + float(sys.argv[3])
written = 0
while time.monotonic() < stop:
    store.turns.add(session, user, "user", f"{sys.argv[2]} {written}")
    written += 1
store.close()
print(written)
"""


def test_writer_processes_on_one_file_all_get_through_and_lose_no_write(tmp_path: Path) -> None:
    path = tmp_path / "keem.db"
    Store(path).close()
    writers = [python(WRITER, path, f"w{n}", 1.0) for n in range(6)]
    written = {}
    for n, proc in enumerate(writers):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"writer {n} failed"
        written[f"w{n}"] = int(out)
    store = Store(path)
    try:
        for name, count in written.items():
            assert count > 0, f"{name} never got the write lock"  # nobody starves for the whole second
            user = store.users.require(name)
            assert store.one("select count(*) as n from turns where user_id = ?", [user])["n"] == count
    finally:
        store.close()


def test_a_writer_blocked_by_another_process_goes_on_once_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "keem.db"
    store = Store(path)
    try:
        user = store.users.get_or_create("민수")
        session = store.sessions.start(user, "keem", "test")
        holder = hold_write_lock(path, 1.0)
        t0 = time.monotonic()
        store.turns.add(session, user, "user", "기다렸다가 써요")
        waited = time.monotonic() - t0
        assert holder.wait(timeout=30) == 0
        assert 0.5 < waited < 20  # it waited for the holder, and went on soon after (a generous bound: noisy CI)
        assert [t["text"] for t in store.turns.of_session(session)] == ["기다렸다가 써요"]
        store.turns.add(session, user, "user", "다음")  # and the busy timeout is back for everything else
        assert store.one("pragma busy_timeout")["timeout"] == int(connection.BUSY_TIMEOUT * 1000)
    finally:
        store.close()


def test_a_write_that_waits_past_the_deadline_fails_saying_what_holds_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keem.db"
    store = Store(path)
    try:
        user = store.users.get_or_create("민수")
        session = store.sessions.start(user, "keem", "test")
        monkeypatch.setattr(connection, "BUSY_TIMEOUT", 0.5)  # 30 s in use
        holder = hold_write_lock(path, 1.5)
        # what callers met before was sqlite3's bare "database is locked"; now it says what holds the lock
        with pytest.raises(StorageError, match=r"waited 0\.5 s for the write lock") as failed:
            store.turns.add(session, user, "user", "못 써요")
        assert "another process keeps a write transaction open" in str(failed.value)
        assert failed.value.code == "storage_busy" and "locked" not in str(failed.value)
        assert "데이터베이스가 다른 작업으로 바쁩니다" in korean_error(failed.value)  # the page's words
        assert holder.wait(timeout=30) == 0
        store.turns.add(session, user, "user", "이제 써요")  # nothing left half-open by the failure
        assert [t["text"] for t in store.turns.of_session(session)] == ["이제 써요"]
    finally:
        store.close()


CLOSER = """
import sys, threading, time
from memory.store import Store
errors = set()
for n in range(20):
    store = Store(f"{sys.argv[1]}/k{n}.db")
    def read():
        try:
            while True:
                store.rows("select * from sqlite_master")
        except Exception as exc:
            errors.add(type(exc).__name__)
    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.01)
    store.close()
    reader.join()
print(sorted(errors))
"""


def test_closing_the_store_while_another_thread_reads_ends_that_thread_with_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    """The app's shutdown closes the store while an update it did not wait for may still be writing its stage: the
    close waits for the statement in flight (SQLite closed beneath one crashed the whole process, SIGSEGV)."""
    proc = python(CLOSER, tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"the process died with {proc.returncode}"
    assert out.strip() == "['ProgrammingError']"


STALLED = """
import os, signal, sys
from memory.store import Store, postgres
from models.errors import StorageError
postgres.STALLED_WRITER_S = 1  # this process's write transactions: cut off after 1 s stalled (10 s in the app)
store = Store(sys.argv[1])
user = store.users.get_or_create("stalled")
try:
    with store.write():
        store.sessions.start(user, "keem", "test")
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # alive, connected, inside its write transaction: a hung process
except StorageError as exc:
    print(exc, flush=True)
    sys.exit(3)
"""


def test_a_postgres_writer_stalled_inside_its_transaction_is_cut_off_and_the_others_write(pg_url: str) -> None:
    """A process stopped while it holds the database's write lock (SIGSTOP; a worker renewing its lease was): the
    server ends its session after STALLED_WRITER_S, the other processes' writes go through well before they would
    give up (WRITE_WAIT_S, 30 s), and the stalled one's transaction is rolled back, with an error when it wakes."""
    from memory.store import postgres

    store = Store(pg_url)
    holder = python(STALLED, pg_url)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        t0 = time.monotonic()
        store.sessions.start(store.users.get_or_create("민수"), "keem", "test")  # a write: waits, then goes on
        assert time.monotonic() - t0 < postgres.WRITE_WAIT_S / 2
    finally:
        holder.send_signal(signal.SIGCONT)
        out, _ = holder.communicate(timeout=60)
    assert holder.returncode == 3 and "undid the write" in out, out
    assert store.rows("select * from sessions where user_id = ?", [store.users.get_or_create("stalled")]) == []
    store.close()
