"""`keem worker` processes on one store: a worker killed (`kill -9`) inside its model call or hung mid-update leaves
its job to another, which commits exactly one version and records the takeover (`keem jobs list` shows it); SIGTERM
stops a worker cleanly; a store a newer keem migrated is refused with nothing written. Real processes, a loopback
model."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.study_records import records
from memory.backup import open_store
from memory.store import Store
from models.fake import stage_of
from tests.fake_openai import FakeOpenAIServer
from tests.procs import ROOT, ended_session, env_for, model_reply, start_worker, stop, wait_for

pytestmark = pytest.mark.slow  # real processes (a few seconds each to start)

SAID = ["나 다음 달에 부산으로 이사해.", "새 회사가 거기 있거든. 조금 떨려."]


def running_in(store, job_id: int, pid: int):  # type: ignore[no-untyped-def]
    job = store.queue.get(job_id)
    return job if job["status"] == "running" and str(job["owner"]).endswith(f":{pid}") else None


def versions(store, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    user_id = store.users.require(name)
    return [r["id"] for r in store.rows("select id from memory_versions where user_id = ?", [user_id])]


class BlockedUpdate:
    """The loopback model's answers (tests/procs.py model_reply), except that the update's first model call (its
    summary) blocks until released: a worker killed meanwhile dies inside its model call."""

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()
        self.stages: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.stages.append(stage_of(str(body["messages"][-1]["content"])) or "chat")
            first = len(self.stages) == 1
        if first:
            self.inside.set()
            self.release.wait(60)
        return model_reply(body)


def keem_jobs(db: str, *args: str) -> str:
    """`keem jobs list` on `db`: its output, after checking it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", "jobs", "list", "--db", db, *args],
        cwd=ROOT,
        env=env_for("http://127.0.0.1:9/v1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_worker_killed_inside_its_model_call_is_taken_over_and_the_job_commits_once(
    tmp_path: Path, store_url: str
) -> None:
    db = store_url
    store = open_store(db)
    job_id = ended_session(store, "minsu", SAID)
    model = BlockedUpdate()
    lease = {"KEEM_JOB_LEASE_S": "4"}  # short: a takeover never waits for the default 900 s
    with FakeOpenAIServer(reply=model) as server:
        first = start_worker(db, server.url, tmp_path / "w1.log", **lease)
        second = None
        try:
            wait_for(lambda: running_in(store, job_id, first.pid) and model.inside.is_set(), 60, "the update call")
            first.send_signal(signal.SIGKILL)  # inside the update's model call
            first.wait(10)
            model.release.set()  # the server's side of the dead call ends; no one reads its answer
            left = store.queue.get(job_id)
            assert left["status"] == "running" and left["takeovers"] == 0  # left behind, its owner dead
            second = start_worker(db, server.url, tmp_path / "w2.log", **lease)
            job = wait_for(lambda: (j := store.queue.get(job_id))["status"] == "done" and j, 60, "the takeover")
            assert job["attempts"] == 2 and job["owner"] is None and job["takeovers"] == 1
            assert job["taken_from"] == f"{socket.gethostname()}:{first.pid} (its process was gone)"
            assert versions(store, "minsu") == [job["version_id"]]  # exactly one new version
            assert any("부산" in s.text for s in store.versions.latest(store.users.require("minsu")).sentences)  # type: ignore[union-attr]
            # the killed worker's call, then the whole update once: the job ran to its end one time
            assert model.stages[0] == "summarize" and model.stages.count("summarize") == 2, model.stages
            time.sleep(1.5)  # a second worker tick: nothing runs it again
            assert versions(store, "minsu") == [job["version_id"]] and store.queue.get(job_id)["status"] == "done"
            assert [j["id"] for j in store.queue.jobs()] == [job_id]  # no job lost, none made twice
            listed = keem_jobs(db)
            assert f"job {job_id}  minsu  session {job['session_id']}  keem  done (" in listed
            assert f"2 attempts, taken over once (last from {job['taken_from']})" in listed
            [row] = json.loads(keem_jobs(db, "--json"))
            assert (row["status"], row["attempts"], row["takeovers"]) == ("done", 2, 1)
            assert stop(second) == 0  # SIGTERM: a clean exit
            assert "keem worker stopped" in (tmp_path / "w2.log").read_text()
            assert "Traceback" not in (tmp_path / "w2.log").read_text()
        finally:
            model.release.set()
            stop(first)
            if second is not None:
                stop(second)
            store.close()


def test_a_hung_worker_keeps_its_job_until_the_lease_runs_out_and_its_late_commit_adds_no_version(
    tmp_path: Path,
    shared_db: str,
) -> None:
    db = shared_db
    store = open_store(db)
    job_id = ended_session(store, "jiwoo", SAID)
    lease = {"KEEM_JOB_LEASE_S": "6"}
    with FakeOpenAIServer(reply=model_reply, latency_s=0.4) as server:
        hung = start_worker(db, server.url, tmp_path / "w1.log", **lease)
        other = start_worker(db, server.url, tmp_path / "w2.log", **lease)
        logs = {hung.pid: tmp_path / "w1.log", other.pid: tmp_path / "w2.log"}
        try:
            job = wait_for(
                lambda: running_in(store, job_id, hung.pid) or running_in(store, job_id, other.pid),
                60,
                "a worker's update",
            )
            hung, other = (hung, other) if str(job["owner"]).endswith(f":{hung.pid}") else (other, hung)
            hung.send_signal(signal.SIGSTOP)  # alive but stuck: only its lease tells
            time.sleep(0.3)
            until = store.queue.get(job_id)["lease_until"]  # it renews no more
            try:
                taken_at = wait_for(lambda: not running_in(store, job_id, hung.pid) and time.time(), 60, "the takeover")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{store.queue.get(job_id)}\n{said(logs)}") from None
            assert taken_at >= until  # never while the lease lasted
            done = wait_for(lambda: (j := store.queue.get(job_id))["status"] == "done" and j, 60, "the other's commit")
            assert versions(store, "jiwoo") == [done["version_id"]]
            hung.send_signal(signal.SIGCONT)  # it wakes, finishes its copy of the update and commits late
            # SIGTERM lets a running job finish (--grace-s, 30 s) before the worker exits: once it has, the late
            # commit has been tried (a fixed wait here could end before it, on a loaded machine it did)
            assert stop(hung, 60) == 0 and "keem worker stopped" in logs[hung.pid].read_text()
            assert versions(store, "jiwoo") == [done["version_id"]]  # one version per job, whoever commits
            late = store.queue.get(job_id)
            assert late["status"] == "done" and late["takeovers"] == 1
            assert late["taken_from"] == f"{socket.gethostname()}:{hung.pid} (its lease ran out)"
        finally:
            stop(hung)
            stop(other)


def said(logs: dict[int, Path]) -> str:
    """The workers' logs, for a failure's message."""
    return "".join(f"\n--- worker {pid}\n{path.read_text()[-3000:]}" for pid, path in logs.items())


def everything_in(db: str) -> Any:
    """What a test can see of a store's contents: the SQLite file's bytes (and the files beside it), or every row of
    every table of the Postgres schema."""
    if "://" not in db:
        folder = Path(db).parent
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}
    import psycopg  # directly: a store refuses to open this database

    with psycopg.connect(db) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "select table_name from information_schema.tables where table_schema = current_schema() order by 1"
            )
        ]
        return {t: sorted(map(repr, conn.execute(f"select * from {t}").fetchall())) for t in tables}


@pytest.mark.parametrize("migration_set", ["keem", "keem_trials"])
def test_a_worker_refuses_a_store_a_newer_keem_migrated_and_writes_nothing(store_url: str, migration_set: str) -> None:
    store = Store(store_url)
    records(store)  # the trial records' set too, as a store that ran a trial has it
    ended_session(store, "minsu", SAID)  # a pending job the worker must not touch
    future = ("m" if store.dialect == "sqlite" else "pg") + ("999_future" if migration_set == "keem" else "t999_future")
    with store.write():
        if store.dialect == "sqlite":
            store.insert("_sqlite_migrations", {"migration_set": migration_set, "name": future, "applied_at": "x"})
        else:
            store.execute("insert into keem_migrations values (?, ?, 'x')", [migration_set, future])
    store.close()
    before = everything_in(store_url)
    started = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", "worker", "--db", store_url, "--model", "openai:fake"],
        cwd=ROOT,
        env=env_for("http://127.0.0.1:9/v1"),  # never reached: it stops before loading a model
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2, started.stderr
    error = started.stderr.strip().splitlines()[-1]
    assert error.startswith("error: database ") and "written by a newer keem" in error and future in error
    assert "upgrade keem-chat on this machine" in error and "Nothing was written" in error
    assert "Traceback" not in started.stderr and "running memory updates" not in started.stderr
    assert everything_in(store_url) == before  # no migration, no claimed job, not a byte
