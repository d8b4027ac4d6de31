"""`keem worker` processes on one store: a worker killed (`kill -9`) or hung mid-update leaves its job to another,
which commits exactly one version; SIGTERM stops a worker cleanly. Real processes, a loopback model."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from memory.backup import open_store
from tests.fake_openai import FakeOpenAIServer
from tests.procs import ended_session, model_reply, start_worker, stop, wait_for

pytestmark = pytest.mark.slow  # real processes (a few seconds each to start)

SAID = ["나 다음 달에 부산으로 이사해.", "새 회사가 거기 있거든. 조금 떨려."]


def running_in(store, job_id: int, pid: int):  # type: ignore[no-untyped-def]
    job = store.queue.get(job_id)
    return job if job["status"] == "running" and str(job["owner"]).endswith(f":{pid}") else None


def versions(store, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    user_id = store.users.require(name)
    return [r["id"] for r in store.rows("select id from memory_versions where user_id = ?", [user_id])]


def test_a_worker_killed_mid_update_is_taken_over_and_one_version_is_committed(tmp_path: Path, shared_db: str) -> None:
    db = shared_db
    store = open_store(db)
    job_id = ended_session(store, "minsu", SAID)
    with FakeOpenAIServer(reply=model_reply, latency_s=0.8) as server:
        first = start_worker(db, server.url, tmp_path / "w1.log")
        second = None
        try:
            wait_for(lambda: running_in(store, job_id, first.pid) and server.requests, 60, "the first worker's update")
            first.send_signal(signal.SIGKILL)  # mid-update: a model call is in flight
            first.wait(10)
            assert store.queue.get(job_id)["status"] == "running"  # left behind, its owner dead
            second = start_worker(db, server.url, tmp_path / "w2.log")
            job = wait_for(lambda: (j := store.queue.get(job_id))["status"] == "done" and j, 60, "the takeover")
            assert job["attempts"] == 2 and job["owner"] is None
            assert versions(store, "minsu") == [job["version_id"]]
            assert any("부산" in s.text for s in store.versions.latest(store.users.require("minsu")).sentences)  # type: ignore[union-attr]
            assert stop(second) == 0  # SIGTERM: a clean exit
            assert "keem worker stopped" in (tmp_path / "w2.log").read_text()
        finally:
            stop(first)
            if second is not None:
                stop(second)


def test_a_hung_worker_keeps_its_job_until_the_lease_runs_out_and_its_late_commit_adds_no_version(
    tmp_path: Path,
    shared_db: str,
) -> None:
    db = shared_db
    store = open_store(db)
    job_id = ended_session(store, "jiwoo", SAID)
    lease = {"KEEM_JOB_LEASE_S": "6"}
    with FakeOpenAIServer(reply=model_reply, latency_s=0.8) as server:
        hung = start_worker(db, server.url, tmp_path / "w1.log", **lease)
        other = start_worker(db, server.url, tmp_path / "w2.log", **lease)
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
            taken_at = wait_for(lambda: not running_in(store, job_id, hung.pid) and time.time(), 60, "the takeover")
            assert taken_at >= until  # never while the lease lasted
            done = wait_for(lambda: (j := store.queue.get(job_id))["status"] == "done" and j, 60, "the other's commit")
            assert versions(store, "jiwoo") == [done["version_id"]]
            hung.send_signal(signal.SIGCONT)  # it wakes, finishes its copy of the update and commits late
            time.sleep(4)
            assert versions(store, "jiwoo") == [done["version_id"]]  # one version per job, whoever commits
            assert store.queue.get(job_id)["status"] == "done"
        finally:
            stop(hung)
            stop(other)
