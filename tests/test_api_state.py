"""The HTTP API's state lives in the store, not in a process (chatbot/api/sessions.py, memory/store/api_state.py):
two app instances on one store (each with its own Chatbot, worker and server) answer one caller in turn, in one
conversation; one restarts, and the same Idempotency-Key replays the first answer there; an idle timeout in the
process that answered earlier leaves a conversation another process went on with; a forget leaves no row. Callers
flooding both instances at once from many threads get KEEM_API_RATE in all, not twice it. On SQLite and on
Postgres."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from chatbot.web.app import build_app
from chatbot.worker import Worker
from memory.store.tokens import caller_key
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel
from tests.api_world import client, code, token_for
from tests.erasure_world import leftovers
from tests.helpers import answer, launch

KEY = "retry-7f3a9c-first-message"  # a key no other byte of the store holds by chance


@contextlib.contextmanager
def app_on(
    url: str, worker_clock: list[float] | None = None, api_rate: int = 120
) -> Iterator[tuple[str, Chatbot, Worker]]:
    """One app process's parts on the store at `url`: (API base URL, bot, worker). With `worker_clock` the worker
    is not started and reads that clock (its idle timeout is 60 s): a test ends idle sessions itself. `api_rate`:
    its KEEM_API_RATE."""
    bot = Chatbot(Settings(db=url), chat_model=ScriptedChatModel(responder=answer), embedder=NgramEmbedder())
    if worker_clock is None:
        worker = Worker(bot, poll_s=0.05).start()
    else:
        worker = Worker(bot, idle_timeout_s=60.0, poll_s=3600, clock=lambda: worker_clock[0])
    app = build_app(bot, worker, api_rate=api_rate)
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


def test_two_processes_let_in_one_rate_per_caller_in_all(store_url: str) -> None:
    """Six threads flood two app instances at once (three each) for a user's own token, six more for a user an app
    token names: each caller gets its burst and then one request per interval in all, as one process would give
    it; a limiter per process would let in twice as many. Every refusal is a 429 rate_limited with the seconds to
    wait. Forgetting the users deletes their counters."""
    rate = 20  # a minute: a burst of 20, then one every 3 s
    with app_on(store_url, api_rate=rate) as (url_a, bot, _), app_on(store_url, api_rate=rate) as (url_b, _, _):
        own = token_for(bot, "서두름")
        _, app_secret = bot.store.tokens.create(None, app=True, label="bot")
        bot.store.users.get_or_create("손님")
        answers: dict[str, list[httpx.Response]] = {"own": [], "app": []}
        start = threading.Barrier(12)
        began = time.monotonic()

        def enough(who: str) -> bool:
            """More requests than two limiters would let in: two bursts, the refill so far, a margin for the
            requests still in flight. Flooding until then, not for fixed seconds: on CI's two loaded cores six
            threads once sent six requests in 2.5 s."""
            return len(answers[who]) > 2 * rate + (time.monotonic() - began) / (60.0 / rate) + 4

        def flood(url: str, who: str) -> None:
            with client(url, own if who == "own" else app_secret) as c:
                params = {} if who == "own" else {"user": "손님"}
                start.wait()
                while not enough(who) and time.monotonic() < began + 60:
                    answers[who].append(c.get("/sessions", params=params))

        threads = [threading.Thread(target=flood, args=(u, w)) for u in (url_a, url_b) for w in answers for _ in "abc"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refill = (time.monotonic() - began) / (60.0 / rate)  # requests the minute's rate let in since the burst
        for who, got in answers.items():
            admitted = [r for r in got if r.status_code == 200]
            refused = [r for r in got if r.status_code != 200]
            assert len(got) > 2 * rate + refill + 1, f"{who}: too few requests to tell one count from two"
            assert rate <= len(admitted) <= rate + refill + 1, (who, len(admitted), len(got))
            assert refused and all(code(r) == "rate_limited" for r in refused)
            assert all(1 <= int(r.headers["Retry-After"]) <= 60 / rate for r in refused)
        keys = [caller_key(None), caller_key("손님")]
        assert len(bot.store.rows("select * from api_rates")) == 2
        for name in ("서두름", "손님"):
            uid = bot.store.users.find(name)
            assert uid is not None
            bot.store.erasure.forget_user(uid)
        assert bot.store.rows("select * from api_rates where caller in (?, ?)", keys) == []


def test_a_rate_counter_is_one_row_a_caller_and_goes_when_its_bucket_is_full_again(store_url: str) -> None:
    from memory.store import Store

    store = Store(store_url)
    try:
        token = store.tokens.create(None, app=True)[0].id
        assert [store.tokens.take(token, "지수", 3, 100.0) for _ in range(4)] == [0.0, 0.0, 0.0, 20.0]
        assert store.tokens.take(token, "지수", 3, 119.5) == 0.5 and store.tokens.take(token, "지수", 3, 120.0) == 0
        assert store.tokens.take(token, None, 3, 120.0) == 0.0  # the token's own count is apart from its users'
        rows = store.rows("select caller from api_rates order by caller")
        assert [r["caller"] for r in rows] == sorted([caller_key(None), caller_key("지수")])
        assert "지수" not in str(rows)
        assert store.tokens.prune_rates(179.0) == 1  # the token's own bucket is full again at 180; 지수's is not
        assert store.tokens.prune_rates(181.0) == 1 and store.rows("select * from api_rates") == []
        assert store.tokens.take(token, "지수", 3, 181.0) == 0.0  # a pruned caller starts with a full bucket
    finally:
        store.close()
