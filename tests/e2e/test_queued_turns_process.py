"""Issue 18: a message typed while a reply streams is a turn from the moment it is sent. `python app.py` in its own
process with a slow loopback model server: the second message waits for the first reply, the app is SIGKILLed,
and after a restart the message is in the database (and the session's update reads it)."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from memory.store import Store
from tests.e2e.conftest import app_process, dep, login_when_ready
from tests.e2e.helpers import server_reply
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import call

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # starts the app twice in its own process


def user_texts(db: Path) -> list[str]:
    store = Store(db)
    try:
        return [t["text"] for s in store.sessions.of_user(1) for t in store.turns.of_session(s["id"])]
    finally:
        store.close()


def test_a_message_waiting_for_a_streaming_reply_survives_a_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "keem.db"
    with FakeOpenAIServer(server_reply, latency_s=8.0) as server:  # every answer starts 8 s after it was asked
        env = {"OPENAI_BASE_URL": server.url, "KEEM_OPENAI_CONTEXT": "8192"}
        with app_process(tmp_path, "openai:slow", env) as (url, proc):
            try:
                who = uuid.uuid4().hex
                login_when_ready(url, who, "민수")
                call(url, dep(url, "send"), ["첫 번째: 오늘 면접을 봤어", None], who)
                replying = threading.Thread(target=lambda: call(url, dep(url, "respond"), [None], who), daemon=True)
                replying.start()  # the first reply waits on the slow server
                time.sleep(1.0)
                joined = httpx.post(  # the page's one stream (opened by respond) carries this event's answer
                    url + "gradio_api/queue/join",
                    json={
                        "data": ["두 번째: 결과는 다음 주에 나와", None],
                        "fn_index": dep(url, "send"),
                        "session_hash": who,
                    },
                    timeout=10,
                )
                assert joined.status_code == 200, joined.text
                deadline = time.monotonic() + 5
                while "두 번째: 결과는 다음 주에 나와" not in user_texts(db) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert "두 번째: 결과는 다음 주에 나와" in user_texts(db)  # a turn already, before the first reply
                assert not any("잘 들었어요" in t for t in user_texts(db))  # the first reply has not come
            finally:
                proc.send_signal(signal.SIGKILL)  # a crash: nothing shuts down cleanly
                proc.wait(20)

        with app_process(tmp_path, "openai:slow", env) as (url, proc):  # the restart
            try:
                assert user_texts(db)[:2] == ["첫 번째: 오늘 면접을 봤어", "두 번째: 결과는 다음 주에 나와"]
                store = Store(db)
                try:  # the crashed session is ended at the start, and its update reads both messages
                    deadline = time.monotonic() + 30
                    while store.sessions.all_open() and time.monotonic() < deadline:
                        time.sleep(0.3)
                    assert store.sessions.all_open() == []
                    assert [j["session_id"] for j in store.queue.jobs(1)] == [store.sessions.of_user(1)[0]["id"]]
                finally:
                    store.close()
            finally:
                proc.kill()  # its update may be waiting on the slow server: not this test's concern
                proc.wait(20)
