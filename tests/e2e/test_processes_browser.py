"""Two app processes and an update worker behind HAProxy (`keem serve`), on one store: two browsers of one user,
each kept on its own process by HAProxy's cookie, see one memory; the update worker is killed (`kill -9`) mid-update
and the job is taken over (supervisord restarts the worker; the dead pid frees the job at once, a lease at the
latest) and commits one version; a forget in one browser is told in the other; nothing typed is lost. API clients,
which keep no cookie, stay on one process per caller (HAProxy hashes the token and an app token's user)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx

from memory.backup import open_store
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import NOTICE, forget_on_page, send
from tests.e2e.pages import enter, last_bot_says, open_tab, shown_memory
from tests.fake_openai import FakeOpenAIServer
from tests.procs import model_reply, needs_serve, serve, wait_for

pytestmark = [needs_chromium, needs_serve]
SAID = "나 다음 달에 부산으로 이사해"
USERS = [f"u{i}" for i in range(16)]


def on_process(new_page: Any, url: str, number: int, **options: Any) -> Any:
    """A browser whose HAProxy cookie already names app process `number` (as after its first visit)."""
    page = new_page(viewport={"width": 1200, "height": 900}, **options)
    page.context.add_cookies([{"name": "keem_proc", "value": f"app{number}", "url": url}])
    return page


def test_two_processes_one_memory_a_killed_worker_is_taken_over_and_a_forget_is_told(
    new_page: Any, tmp_path: Path, shared_db: str
) -> None:
    db = shared_db
    with FakeOpenAIServer(reply=model_reply, latency_s=0.5) as model:
        with serve(tmp_path, db, model.url, 2, 1, KEEM_JOB_LEASE_S="20", KEEM_IDENTITY="browser") as (url, _, _):
            store = open_store(db)
            first = on_process(new_page, url, 1)
            enter(first, url, "민수")
            send(first, SAID)
            last_bot_says(first, "부산")
            first.locator("#end-button").click()

            job = wait_for(lambda: next(iter(store.queue.jobs(statuses=("running",))), None), 30, "the update")
            calls = len(model.requests)
            wait_for(lambda: len(model.requests) > calls, 10, "a model call of the update")
            os.kill(int(job["owner"].rpartition(":")[2]), signal.SIGKILL)  # supervisord starts another worker
            first.locator("#progress").get_by_text("완료").wait_for(timeout=40_000)
            done = store.queue.get(job["id"])
            assert done["status"] == "done" and done["attempts"] == 2
            user_id = job["user_id"]  # "민수#<key>": the name within the first browser (KEEM_IDENTITY=browser)
            assert [r["id"] for r in store.rows("select id from memory_versions where user_id = ?", [user_id])] == [
                done["version_id"]
            ]

            # the same browser (its localStorage: the identity key gr.BrowserState keeps) served by the other process
            second = on_process(new_page, url, 2, storage_state=first.context.storage_state())
            enter(second, url, "민수")
            for page in (first, second):
                open_tab(page, "기억")
                assert "부산" in shown_memory(page, "현재 기억 v1")

            said = store.rows("select text from turns where user_id = ? and role = 'user'", [user_id])
            assert [t["text"] for t in said] == [SAID]  # nothing typed was lost

            forget_on_page(second, "민수")
            open_tab(first, "대화")
            first.locator("#new-session-button").click()  # the other process's tab: its next event tells it
            first.get_by_text(NOTICE).first.wait_for(timeout=15_000)
            first.locator("#start-button").wait_for(state="visible", timeout=15_000)
            assert store.rows("select * from turns") == [] and store.users.existing([user_id]) == set()

            # the API through the same HAProxy: its clients keep no cookie (a new openai client per script run), so
            # a caller's requests go to one process, by a hash of the token and an app token's user
            token = store.tokens.create(store.users.get_or_create("api-user"))[1]
            seen = set()
            for _ in range(2):  # two runs of a script: two fresh clients
                with api_client(url, token) as c:
                    r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "이사 준비해"}]})
                    assert r.status_code == 200, r.text
                    seen.add((r.headers["X-Keem-Process"], r.json()["keem"]["session_id"]))
            assert len(seen) == 1  # one process, so one conversation
            with api_client(url, store.tokens.create(None, app=True)[1]) as c:
                served = {u: c.get("/memory", params={"user": u}).headers["X-Keem-Process"] for u in USERS}
                assert served == {u: c.get("/memory", params={"user": u}).headers["X-Keem-Process"] for u in USERS}
                assert set(served.values()) == {"app1", "app2"}  # an app's users spread over the processes
                r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "안녕"}], "user": "u7"})
                assert r.status_code == 200 and r.headers["X-Keem-Process"] == served["u7"]
                for u in USERS:  # turns of a bot's own model: each user's on that user's process, with its conversation
                    said = {"messages": [{"role": "user", "content": "내 모델과 얘기했어"}], "user": u}
                    r = c.post("/sessions/messages", json=said)
                    assert r.status_code == 201 and r.headers["X-Keem-Process"] == served[u], (u, r.text)
            for page in (first, second):  # an open page holds its app's shutdown for Gradio's 5 s
                page.context.close()


def api_client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
