"""The HTTP API's state lives in the store, not in a process (chatbot/api/sessions.py, memory/store/api_state.py):
two app instances on one store (each with its own Chatbot, worker and server) answer one caller in turn, in one
conversation; one restarts, and the same Idempotency-Key replays the first answer there; an idle timeout in the
process that answered earlier leaves a conversation another process went on with; a forget leaves no row. On SQLite
and on Postgres."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from chatbot.web.app import build_app
from chatbot.worker import Worker
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel
from tests.api_world import client, code, token_for
from tests.erasure_world import leftovers
from tests.helpers import answer, launch

KEY = "retry-7f3a9c-first-message"  # a key no other byte of the store holds by chance


@contextlib.contextmanager
def app_on(url: str, worker_clock: list[float] | None = None) -> Iterator[tuple[str, Chatbot, Worker]]:
    """One app process's parts on the store at `url`: (API base URL, bot, worker). With `worker_clock` the worker
    is not started and reads that clock (its idle timeout is 60 s): a test ends idle sessions itself."""
    bot = Chatbot(Settings(db=url), chat_model=ScriptedChatModel(responder=answer), embedder=NgramEmbedder())
    if worker_clock is None:
        worker = Worker(bot, poll_s=0.05).start()
    else:
        worker = Worker(bot, idle_timeout_s=60.0, poll_s=3600, clock=lambda: worker_clock[0])
    app = build_app(bot, worker)
    base = launch(app)
    try:
        yield f"{base}v1", bot, worker
    finally:
        worker.stop()
        app.close()
        bot.store.close()


def send(c: httpx.Client, text: str, key: str | None = None, status: int = 200) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    body = {"model": "keem", "messages": [{"role": "user", "content": text}]}
    r = c.post("/chat/completions", json=body, headers=headers)
    assert r.status_code == status, r.text
    return dict(r.json())


def said(r: dict[str, Any]) -> str:
    return str(r["choices"][0]["message"]["content"])


def test_two_processes_and_a_restart_keep_one_conversation_and_its_keys(store_url: str) -> None:
    clock = [0.0]
    with app_on(store_url, worker_clock=clock) as (url_a, bot_a, worker_a):
        token = token_for(bot_a, "민수")
        uid = bot_a.store.users.find("민수")
        assert uid is not None
        with app_on(store_url) as (url_b, bot_b, _):
            a, b = client(url_a, token), client(url_b, token)
            first = send(a, "나 다음 주에 부산으로 이사해", KEY)
            session = first["keem"]["session_id"]
            assert send(b, "이사 준비가 힘들어")["keem"]["session_id"] == session  # the other process goes on
            third = send(a, "짐이 너무 많아", "key-3")
            assert third["keem"]["session_id"] == session
            again = send(b, "나 다음 주에 부산으로 이사해", KEY)  # a retry that reaches the other process
            assert again["keem"]["replayed"] and said(again) == said(first)
            turns = bot_b.store.turns.of_session(session)
            assert [t["role"] for t in turns] == ["user", "assistant"] * 3  # nothing stored twice
            user_said = ["나 다음 주에 부산으로 이사해", "이사 준비가 힘들어", "짐이 너무 많아"]
            assert [t["text"] for t in turns[::2]] == user_said
            assert send(b, "다른 말", "key-3", status=422)["error"]["code"] == "idempotency_key_reused"
            assert send(b, "박스를 더 사야겠어")["keem"]["session_id"] == session
            clock[0] += 61.0  # A answered before B went on: A lets the conversation go, it does not end it
            assert worker_a.end_idle() == [] and bot_a.store.api.open_session(uid) == session
            a.close()
            b.close()
    with app_on(store_url) as (url_c, bot_c, _):  # a restart: a new process on the same store
        c = client(url_c, token)
        replayed = send(c, "짐이 너무 많아", "key-3")
        assert replayed["keem"] == {"session_id": session, "memory": [], "replayed": True}
        assert said(replayed) == said(third)
        assert send(c, "내일 이삿짐 센터가 와")["keem"]["session_id"] == session  # the same conversation
        assert len(bot_c.store.turns.of_session(session)) == 10
        ended = c.post("/sessions/end")
        assert ended.status_code == 202 and ended.json()["session_id"] == session
        assert send(c, "새 대화")["keem"]["session_id"] != session
        assert c.delete("/user", params={"confirm": "true"}).status_code == 200
        for table in ("api_requests", "api_conversations"):
            assert bot_c.store.rows(f"select * from {table} where user_id = ?", [uid]) == []
        assert code(c.get("/memory")) == "token_invalid"
        c.close()
        if "://" not in store_url:  # SQLite: no byte of the user's words or keys is left in the file
            assert leftovers(Path(store_url).parent, KEY, "짐이 너무 많아", "내일 이삿짐 센터가 와") == []


def test_the_store_keeps_keys_as_hashes_and_ids_only_and_the_last_64_of_a_user(store_url: str) -> None:
    from memory.store import Store
    from memory.store.api_state import KEYS_PER_USER, Attempt

    store = Store(store_url)
    try:
        uid = store.users.get_or_create("minsu")
        session, new = store.api.open_or_start(uid, "keem", "demo")
        assert new and store.api.open_or_start(uid, "keem", "demo") == (session, False)
        for i in range(KEYS_PER_USER + 2):
            store.api.remember(uid, f"secret-key-{i}", Attempt("d", session, i))
        assert store.api.attempt(uid, "secret-key-0") is None and store.api.attempt(uid, "secret-key-2") is not None
        store.api.replied(uid, "secret-key-5", 99)
        assert store.api.attempt(uid, "secret-key-5") == Attempt("d", session, 5, 99, ())
        rows = store.rows("select * from api_requests")
        assert len(rows) == KEYS_PER_USER and not any("secret-key" in str(v) for r in rows for v in r.values())
        store.sessions.end(session)
        assert store.api.open_session(uid) is None and store.api.open_or_start(uid, "keem", "demo")[0] != session
    finally:
        store.close()
