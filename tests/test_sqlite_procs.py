"""Several app processes on one SQLite file are supported (docs/scaling.md): `keem serve` with two real app processes
and an update worker on one file, eight API callers each sending to both processes in turn at once, while another
process holds the file's write lock for two seconds (a long write, the sqlite3 shell in BEGIN). Every request is
answered (the writes wait for the lock: memory/store/connection.py), no "database is locked" reaches a caller or a
log, nothing typed is lost or stored twice, every session's update commits one version.

The multi-process tests elsewhere run on `shared_db`, which is Postgres under `make test`: this one is SQLite always."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from memory.store import Store
from tests.fake_openai import FakeOpenAIServer
from tests.procs import hold_write_lock, model_reply, needs_serve, serve, wait_for

pytestmark = [pytest.mark.slow, needs_serve]
CALLERS, MESSAGES = 8, 6


def test_two_app_processes_on_one_sqlite_file_answer_everyone_and_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "keem.db"
    store = Store(db)
    tokens = {f"caller{i}": store.tokens.create(store.users.get_or_create(f"caller{i}"))[1] for i in range(CALLERS)}
    answers: list[tuple[str, httpx.Response]] = []
    held = threading.Event()
    with FakeOpenAIServer(reply=model_reply, latency_s=0.05) as model:
        with serve(tmp_path, str(db), model.url, 2, 1) as (url, run, _):
            port = urlsplit(url).port
            assert port is not None
            apps = [f"http://127.0.0.1:{port + n}/v1" for n in (1, 2)]  # each app process, not through HAProxy
            start = threading.Barrier(CALLERS + 1)

            def caller(name: str) -> None:
                clients = [
                    httpx.Client(base_url=a, headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=90)
                    for a in apps
                ]
                start.wait()
                for m in range(MESSAGES):
                    if m == MESSAGES // 2:
                        held.wait(30)  # the second half is sent while another process holds the write lock
                    body = {"model": "keem", "messages": [{"role": "user", "content": f"{name} 메시지 {m}"}]}
                    answers.append(("chat", clients[m % 2].post("/chat/completions", json=body)))
                answers.append(("end", clients[1].post("/sessions/end")))
                for c in clients:
                    c.close()

            threads = [threading.Thread(target=caller, args=(name,)) for name in tokens]
            for t in threads:
                t.start()
            start.wait()
            time.sleep(0.5)
            holder = hold_write_lock(db, 2.0)
            held.set()
            assert holder.wait(timeout=30) == 0
            for t in threads:
                t.join(timeout=120)
            assert len(answers) == CALLERS * (MESSAGES + 1)
            failed = [(k, r.status_code, r.text) for k, r in answers if r.status_code != (200 if k == "chat" else 202)]
            assert failed == []  # nobody got an error, a "database is locked" least of all

            def all_done() -> bool:
                rows = store.rows("select status from update_jobs")
                return len(rows) == CALLERS and all(r["status"] == "done" for r in rows)

            wait_for(all_done, 120, "every caller's memory update")
            logs = "".join(p.read_text() for p in (run / "logs").glob("*.log"))
        assert "database is locked" not in logs and "Traceback" not in logs
    for name in tokens:
        user = store.users.require(name)
        turns = store.rows("select role, text from turns where user_id = ? order by id", [user])
        said = [t["text"] for t in turns if t["role"] == "user"]
        assert said == [f"{name} 메시지 {m}" for m in range(MESSAGES)]  # all there, in order, once each
        assert [t["role"] for t in turns] == ["user", "assistant"] * MESSAGES
        assert len(store.rows("select id from memory_versions where user_id = ?", [user])) == 1
    store.close()
