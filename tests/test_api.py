"""The HTTP API (chatbot/api) served by the app itself on a loopback port, with the scripted chat model: the
official `openai` client (plain and streamed) and raw HTTP; tokens, isolation under concurrent use, If-Match, errors,
forgetting with no copy left, and one record shared with the page (지난 대화, the memory tab)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from chatbot.api.auth import Auth, Limiter
from chatbot.api.chat import stream
from chatbot.bot import Chatbot
from chatbot.cli.main import main
from chatbot.study import give_consent, study_from_dict
from chatbot.web.app import build_app
from chatbot.web.backend import AppContext, Backend
from chatbot.web.frames import Frames
from chatbot.web.memory_tab import panel
from chatbot.web.past import Past
from chatbot.worker import Worker
from memory.store import Sentence, Store
from models.errors import AccessError, GenerationError
from models.fake import ScriptedChatModel
from tests.api_world import ODD_QUERIES, RATE, client, code, end_and_wait, run_example, serve_api, token_for
from tests.erasure_world import leftovers
from tests.helpers import PLAN, launch, login, make_bot, say, wait_job


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Chatbot, Path]]:
    """The app with its API on a free 127.0.0.1 port: (API base URL, Blocks, bot, data folder)."""
    with serve_api(tmp_path_factory.mktemp("api") / "data") as served:
        yield served


def chat(c: httpx.Client, *texts: str, **more: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": t} for t in texts]
    r = c.post("/chat/completions", json={"model": "keem", "messages": messages, **more})
    assert r.status_code == 200, r.text
    return r.json() if not more.get("stream") else {"events": r.text}


def test_tokens_are_stored_as_hashes_revocable_and_go_with_a_forgotten_user(store: Store) -> None:
    uid = store.users.get_or_create("minsu")
    made, secret = store.tokens.create(uid, label="bot")
    app, app_secret = store.tokens.create(None, app=True)
    assert store.tokens.verify(secret) == made and store.tokens.verify(app_secret).app  # type: ignore[union-attr]
    assert store.tokens.verify(secret + "x") is None and store.tokens.verify("Bearer") is None
    rows = store.rows("select * from api_tokens")
    assert rows and not any(secret in str(v) or app_secret in str(v) for r in rows for v in r.values())
    store.tokens.revoke(app.id)
    assert store.tokens.verify(app_secret) is None and store.tokens.all()[1].revoked_at
    store.erasure.forget_user(uid)
    assert store.tokens.verify(secret) is None and [t.id for t in store.tokens.all()] == [app.id]


def test_token_commands_print_a_token_once_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "keem.db")
    assert main(["token", "create", "--user", "민수", "--db", db]) == 0
    secret = capsys.readouterr().out.strip()
    assert main(["token", "list", "--db", db, "--json"]) == 0
    listed = capsys.readouterr().out
    assert '"user": "민수"' in listed and secret not in listed
    assert main(["token", "revoke", "1", "--db", db]) == 0
    store = Store(db)
    assert store.tokens.verify(secret) is None
    store.close()
    study = tmp_path / "study.toml"  # a trial whose plan gives participants no API
    study.write_text('id = "s1"\ntitle = "t"\nsessions = 2\nconsent = "동의"\n', encoding="utf-8")
    assert main(["token", "create", "--user", "P001", "--db", db, "--study", str(study)]) == 2
    assert "api = true" in capsys.readouterr().err


def test_the_openai_client_chats_plain_and_streamed_and_resent_messages_are_not_stored_again(served: Any) -> None:
    base, _, bot, _ = served
    ai = openai.OpenAI(base_url=base, api_key=token_for(bot, "오픈에이아이"), max_retries=0)
    first = "나는 고양이 나비를 키워"
    plain = ai.chat.completions.create(model="keem", messages=[{"role": "user", "content": first}])
    said = plain.choices[0].message.content or ""
    assert said.startswith("네, 잘 들었어요") and plain.choices[0].finish_reason == "stop"
    history = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "나비는 세 살이야"},
    ]
    chunks = list(ai.chat.completions.create(model="keem", messages=history, stream=True))  # type: ignore[arg-type]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3 and streamed.startswith("네, 잘 들었어요") and chunks[-1].choices[0].finish_reason == "stop"
    uid = bot.store.users.find("오픈에이아이")
    [session] = bot.store.sessions.of_user(uid)
    turns = bot.store.turns.of_session(session["id"])
    assert [t["text"] for t in turns if t["role"] == "user"] == [first, "나비는 세 살이야"]
    assert [t["text"] for t in turns if t["role"] == "assistant"] == [said, streamed.strip()]
    with pytest.raises(openai.AuthenticationError) as refused:
        openai.OpenAI(base_url=base, api_key="keem_wrong", max_retries=0).chat.completions.create(
            model="keem", messages=[{"role": "user", "content": "안녕"}]
        )
    assert refused.value.status_code == 401 and "keem_wrong" not in str(refused.value)


def test_raw_http_streams_openai_chunks_ending_done(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "스트림")) as c:
        body = {"model": "keem", "stream": True, "messages": [{"role": "user", "content": "안녕"}]}
        with c.stream("POST", "/chat/completions", json=body) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert '"role": "assistant"' in events[0] and '"finish_reason": "stop"' in events[-2]


def test_errors_are_json_with_a_code(served: Any) -> None:
    base, _, bot, _ = served
    token = token_for(bot, "오류")
    with client(base, None) as anon, client(base, token) as c, client(base, "keem_" + "x" * 40) as wrong:
        assert anon.get("/memory").status_code == 401 and code(anon.get("/memory")) == "token_missing"
        assert wrong.get("/memory").status_code == 401 and code(wrong.get("/memory")) == "token_invalid"
        r = c.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and code(r) == "bad_body"
        r = c.post("/chat/completions", json={"model": "keem"})
        assert r.status_code == 422 and code(r) == "bad_body" and "messages" in r.json()["error"]["message"]
        r = c.post("/chat/completions", json={"messages": [{"role": "system", "content": "hi"}]})
        assert r.status_code == 422 and code(r) == "bad_body"
        r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": " \x00 "}]})
        assert r.status_code == 422 and code(r) == "empty_message"
        r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "가" * 5000}]})
        assert r.status_code == 413 and code(r) == "message_too_long"
        r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "가" * 600_000}]})
        assert r.status_code == 413 and code(r) == "body_too_large"
        assert c.get("/nowhere").status_code == 404 and code(c.get("/nowhere")) == "not_found"
        assert c.get("/jobs/999999").status_code == 404
        assert token not in r.text
    assert bot.store.users.find("오류") is not None and not bot.store.sessions.past(bot.store.users.find("오류"))


def test_a_token_over_its_rate_gets_429(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "급한사람")) as c:
        answers = [c.get("/memory") for _ in range(RATE + 5)]
    limited = [r for r in answers if r.status_code == 429]
    assert limited and code(limited[0]) == "rate_limited" and int(limited[0].headers["Retry-After"]) >= 1
    clock = [1000.0]
    limiter, tokens = Limiter(2, clock=lambda: clock[0]), bot.store.tokens
    first, second = (tokens.create(None, app=True)[0].id for _ in range(2))
    limiter.take(tokens, first), limiter.take(tokens, first)
    with pytest.raises(AccessError) as refused:
        limiter.take(tokens, first)
    assert refused.value.code == "rate_limited" and refused.value.params["retry_after"] == 30
    limiter.take(tokens, second)  # another token has its own
    limiter.take(tokens, first, "손님")  # and so has each user an app token names
    clock[0] += 29.0
    with pytest.raises(AccessError) as refused:
        limiter.take(tokens, first)
    assert refused.value.params["retry_after"] == 1
    clock[0] += 1.0
    limiter.take(tokens, first)


def test_an_app_tokens_users_each_have_the_rate_a_users_token_has(served: Any) -> None:
    """A bot serving many people through one app token is limited per person, not all of them together."""
    base, _, bot, _ = served
    _, secret = bot.store.tokens.create(None, app=True, label="many")
    for i in range(4):
        bot.store.users.get_or_create(f"손님{i}")
    with client(base, secret) as c:
        answers = [c.get("/sessions", params={"user": f"손님{i % 4}"}) for i in range(RATE * 2)]
        assert [r.status_code for r in answers] == [200] * (RATE * 2)  # 4 people, half their rate each
        flood = [c.get("/sessions", params={"user": "손님0"}) for _ in range(RATE)]
        assert code(flood[-1]) == "rate_limited"
        assert c.get("/sessions", params={"user": "손님1"}).status_code == 200  # the others go on


def test_memory_changes_name_the_version_read_and_a_stale_one_is_412(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "고치기")) as c:
        chat(c, "나는 서울에 살아")
        chat(c, "요즘 테니스를 배워")
        assert end_and_wait(c) == 1
        read = c.get("/memory")
        assert read.headers["ETag"] == '"1"' and read.json()["emotions"] == []
        first, second = read.json()["sentences"]
        r = c.patch(
            f"/memory/sentences/{first['id']}", json={"text": "사용자는 부산에 산다"}, headers={"If-Match": '"1"'}
        )
        assert r.status_code == 200 and r.headers["ETag"] == '"2"'
        assert r.json()["sentences"][0]["text"] == "사용자는 부산에 산다"
        assert r.json()["notes"] == [{"code": "edited", "params": {"sentence": 1}}]  # codes, not words
        stale = c.patch(
            f"/memory/sentences/{first['id']}", json={"text": "사용자는 대구에 산다"}, headers={"If-Match": "1"}
        )
        assert (
            stale.status_code == 412
            and code(stale) == "memory_changed"
            and stale.json()["error"]["params"]["number"] == 2
        )
        second = r.json()["sentences"][1]  # each version's sentences have their own ids
        assert c.delete(f"/memory/sentences/{second['id']}").status_code == 428
        assert c.delete("/memory/sentences/999999", headers={"If-Match": "2"}).status_code == 404
        gone = c.delete(f"/memory/sentences/{second['id']}", headers={"If-Match": "2"})
        assert gone.status_code == 200 and len(gone.json()["sentences"]) == 1
        added = c.post("/memory/sentences", json={"text": "사용자는 김치찌개를 좋아한다"})
        assert added.status_code == 201 and added.json()["version"] == 4
        assert c.post("/memory/restore", json={"sentence_id": second["id"]}).json()["version"] == 5
        back = c.post("/memory/revert", json={"to": 1}, headers={"If-Match": "5"})
        assert back.json()["notes"] == [{"code": "reverted", "params": {"to": 1}}]
        assert back.status_code == 200 and [s["text"] for s in back.json()["sentences"]] == [
            first["text"],
            second["text"],
        ]
        assert [v["version"] for v in c.get("/memory/history").json()["versions"]] == [1, 2, 3, 4, 5, 6]
        assert c.get("/memory/changes", params={"version": 2}).status_code == 200
        latest = c.get("/memory").json()
        why = c.get(f"/memory/sentences/{latest['sentences'][0]['id']}/why")
        assert why.status_code == 200 and why.json()["version"] == 6
        erased = c.post(f"/memory/sentences/{latest['sentences'][1]['id']}/erase")
        assert erased.status_code == 200 and second["text"] not in str(c.get("/memory/history").json())
        assert second["text"] not in str(c.get("/memory").json())


def test_memory_as_of_a_day_is_the_version_of_then_with_its_times_read_as_then(served: Any) -> None:
    base, _, bot, _ = served
    uid = bot.store.users.get_or_create(Chatbot.user_key("그때"))
    exam = "사용자는 2026년 12월 8일에 시험이 있다."
    bot.store.versions.commit(uid, [Sentence(exam, "added")], base=None, strategy="keem", status="ok", author="updater")
    done = "사용자는 2026년 12월 8일에 시험을 봤다."
    bot.store.versions.commit(uid, [Sentence(done, "added")], base=1, strategy="keem", status="ok", author="updater")
    with bot.store.write():  # the store's lock and its own transaction: the app's worker writes meanwhile
        bot.store.execute(
            "update memory_versions set created_at = ? where user_id = ? and number = 1",
            ["2026-11-30T03:00:00+00:00", uid],
        )
    with client(base, token_for(bot, "그때")) as c:
        then = c.get("/memory", params={"as_of": "2026-12-01"})
        assert then.status_code == 200 and then.headers["ETag"] == '"1"' and then.json()["read_on"] == "2026-12-01"
        (sentence,) = then.json()["sentences"]
        assert (
            sentence["text"] == exam
            and sentence["as_read"] == "사용자는 2026년 12월 8일(다음 주 화요일)에 시험이 있다."
        )
        assert c.get("/memory").json()["sentences"][0]["text"] == done
        assert c.get("/memory", params={"as_of": "2026-11-01"}).json() == {
            "version": 0,
            "sentences": [],
            "emotions": [],
        }
        bad = c.get("/memory", params={"as_of": "12/01"})
        assert bad.status_code == 422 and "as_of" in bad.text


def test_two_users_at_once_never_see_each_others_memory_or_jobs(served: Any) -> None:
    base, _, bot, _ = served
    secrets = {"동시가": "사용자 가의 비밀은 파란 우산", "동시나": "사용자 나의 비밀은 빨간 모자"}
    found: dict[str, Any] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def live(name: str) -> None:
        try:
            with client(base, token_for(bot, name)) as c:
                start.wait()
                for i in range(3):
                    chat(c, f"{secrets[name]} {i}", stream=(name == "동시가"))
                end_and_wait(c)
                found[name] = (c.get("/memory").json(), c.get("/sessions").json(), c)
                found[name + "job"] = c.get("/sessions").json()["sessions"][0]["id"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=live, args=(n,)) for n in secrets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for name, other in (("동시가", "동시나"), ("동시나", "동시가")):
        memory, sessions, _ = found[name]
        text = str(memory) + str(sessions)
        assert secrets[name] in text and secrets[other] not in text
        with client(base, token_for(bot, name)) as c:
            theirs = found[other + "job"]
            assert c.get(f"/sessions/{theirs}").status_code == 404
            their_sentence = found[other][0]["sentences"][0]["id"]
            assert c.get(f"/memory/sentences/{their_sentence}/why").status_code == 404
            assert c.post("/memory/restore", json={"sentence_id": their_sentence}).status_code == 404
            their_jobs = bot.store.queue.jobs(bot.store.users.find(other))
            r = c.get(f"/jobs/{their_jobs[0]['id']}")
            assert r.status_code == 404 and code(r) == "not_found"


def test_a_job_waited_for_answers_once_done_in_one_request_and_a_bad_wait_says_how_to_fix_it(served: Any) -> None:
    """`GET /v1/jobs/{id}?wait=S` holds the request until the update is done (or S seconds pass), so a bot needs one
    request, not a poll every half second; another user's job is not found at once, whatever the wait."""
    base, _, bot, _ = served
    with client(base, token_for(bot, "기다림")) as c, client(base, token_for(bot, "남")) as other:
        chat(c, "나 다음 주에 제주도로 여행 가")
        job_id = c.post("/sessions/end").json()["job_id"]
        r = c.get(f"/jobs/{job_id}", params={"wait": 20})
        assert r.status_code == 200 and r.json()["status"] == "done" and r.json()["version"] == 1, r.text
        started = time.monotonic()
        assert c.get(f"/jobs/{job_id}", params={"wait": 20}).json()["status"] == "done"  # done already: at once
        r = other.get(f"/jobs/{job_id}", params={"wait": 20})
        assert r.status_code == 404 and code(r) == "not_found" and time.monotonic() - started < 5
        for bad in ("-1", "31", "soon"):
            r = c.get(f"/jobs/{job_id}", params={"wait": bad})
            assert r.status_code == 422 and code(r) == "bad_body" and "query.wait" in r.json()["error"]["message"]
            assert "request body" not in r.json()["error"]["message"]


def test_an_app_token_acts_for_the_user_each_request_names(served: Any) -> None:
    base, _, bot, _ = served
    _, secret = bot.store.tokens.create(None, app=True, label="discord")
    with client(base, secret) as c:
        r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "안녕"}]})
        assert r.status_code == 422 and code(r) == "token_needs_user"
        body = {"user": "디스코드1", "messages": [{"role": "user", "content": "나는 디스코드1의 사용자야"}]}
        assert c.post("/chat/completions", json=body).status_code == 200
        assert c.post("/sessions/end", params={"user": "디스코드1"}).status_code == 202
        assert c.get("/sessions", params={"user": "디스코드2"}).status_code == 404
        listed = c.get("/sessions", params={"user": "디스코드1"}).json()["sessions"]
        assert listed[0]["first"] == "나는 디스코드1의 사용자야"


def test_a_forget_through_the_api_leaves_no_copy_and_its_token_stops(served: Any) -> None:
    base, _, bot, data = served
    name, told = "잊을사람보라", "내 사물함 번호는 4417-9932야"
    token = token_for(bot, name)
    with client(base, token) as c:
        chat(c, told)
        end_and_wait(c)
        assert told in str(c.get(f"/sessions/{c.get('/sessions').json()['sessions'][0]['id']}").json())
        assert c.delete("/user").status_code == 422  # forgetting is final: it must be confirmed
        r = c.delete("/user", params={"confirm": "true"})
        assert r.status_code == 200 and r.json()["erased"]["turns"] == 2
        assert c.get("/memory").status_code == 401
    assert leftovers(data, told, "4417-9932", name) == []
    assert bot.store.users.find(name) is None


def test_a_conversation_over_the_api_is_on_the_page_and_the_pages_is_in_the_api(served: Any) -> None:
    base, app, bot, _ = served
    ui, name = app.keem_ui, "같이쓰는사람"
    with client(base, token_for(bot, name)) as c:
        chat(c, "API로 말한 강아지 이야기")
        end_and_wait(c)
        state = login(ui, name)  # the page: the same user
        listed = Past(ui.ctx).listing(state).past_pick["choices"]
        assert any("API로 말한 강아지" in label for label, _ in listed)
        shown = panel(ui.ctx, state).memory
        assert any("API로 말한 강아지" in row.text for row in shown.rows)
        say(ui, "페이지에서 말한 고양이 이야기", state)
        ui.chat.end_session(state)
        wait_job(ui, state)
        assert c.get("/sessions").json()["sessions"][0]["first"] == "페이지에서 말한 고양이 이야기"
        assert "페이지에서 말한 고양이" in str(c.get("/memory").json()["sentences"])


def test_the_openapi_schema_is_served_and_loading_models_answer_503(tmp_path: Path) -> None:
    release = threading.Event()

    def load() -> tuple[Chatbot, Worker]:
        release.wait(20)
        bot = make_bot(tmp_path / "keem.db")
        return bot, Worker(bot, poll_s=0.05).start()

    backend = Backend.loading(load)
    app = build_app(backend)
    url = launch(app)
    try:
        schema = httpx.get(f"{url}v1/openapi.json").json()
        assert "/chat/completions" in schema["paths"] and "/memory/sentences/{sentence_id}" in schema["paths"]
        r = httpx.post(f"{url}v1/chat/completions", json={"messages": [{"role": "user", "content": "안녕"}]})
        assert r.status_code == 503 and code(r) == "models_loading" and r.headers["Retry-After"]
    finally:
        release.set()
        backend.done.wait(20)
        if backend.worker is not None:
            backend.worker.stop()
        app.close()


def test_in_a_study_only_consenting_participants_of_a_plan_that_allows_it(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "keem.db")
    uid = bot.store.users.get_or_create("P001")
    _, secret = bot.store.tokens.create(uid)
    for plan, refusal in (({**PLAN}, "study_api_off"), ({**PLAN, "api": True}, "study_consent")):
        auth = Auth(AppContext(Backend(bot, Worker(bot)), study=study_from_dict(plan)), 10)
        with pytest.raises(AccessError) as refused:
            auth.caller(secret)
        assert refused.value.code == refusal
    study = study_from_dict({**PLAN, "api": True})
    _, app_secret = bot.store.tokens.create(None, app=True)
    with pytest.raises(AccessError) as refused:  # an app token makes no participant: consent comes first
        Auth(AppContext(Backend(bot, Worker(bot)), study=study), 10).caller(app_secret, "P777", create=True)
    assert refused.value.code == "study_consent" and bot.store.users.find("P777") is None
    give_consent(bot.store, uid, study)
    assert Auth(AppContext(Backend(bot, Worker(bot)), study=study), 10).caller(secret).user_id == uid


def test_an_idle_api_session_ends_by_the_timeout_and_a_studys_rules_hold_for_the_next(tmp_path: Path) -> None:
    """A participant of a plan with `api = true` who agreed: their API conversation counts as a study session;
    idle, the worker ends it and queues its update; the next one, before the study's gap, is refused (403)."""
    clock = [0.0]
    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot, idle_timeout_s=60.0, poll_s=3600, clock=lambda: clock[0])  # its loop is not started
    study = study_from_dict({**PLAN, "api": True})
    give_consent(bot.store, bot.store.users.get_or_create("P002"), study)
    app = build_app(bot, worker, study=study)
    url = launch(app)
    try:
        with client(f"{url}v1", token_for(bot, "P002")) as c:
            first = chat(c, "첫 번째 연구 대화")["keem"]["session_id"]
            clock[0] += 61.0
            assert worker.end_idle() == [first]
            assert bot.store.sessions.get(first)["end_reason"] == "idle" and bot.store.queue.jobs(statuses=("pending",))
            r = c.post("/chat/completions", json={"messages": [{"role": "user", "content": "두 번째"}]})
            assert (
                r.status_code == 403 and code(r) == "study_wait" and r.json()["error"]["message_ko"].startswith("다음")
            )
            assert len(bot.store.sessions.of_user(bot.store.users.find("P002"))) == 1
    finally:
        worker.stop()
        app.close()


class Paced(ScriptedChatModel):
    """Replies in 20 pieces 30 ms apart: a stream a client can leave half-way."""

    def stream(self, messages: Any, options: Any = None) -> Any:
        for i in range(20):
            time.sleep(0.03)
            yield f"조각{i} "


def test_a_client_that_leaves_a_stream_leaves_a_stopped_reply_and_the_user_free_to_go_on(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "keem.db", Paced())
    worker = Worker(bot, poll_s=0.05).start()
    app = build_app(bot, worker)
    url = launch(app)
    try:
        with client(f"{url}v1", token_for(bot, "떠난사람")) as c:
            body = {"stream": True, "messages": [{"role": "user", "content": "길게 말해줘"}]}
            with c.stream("POST", "/chat/completions", json=body) as r:
                for i, _ in enumerate(r.iter_lines()):
                    if i == 4:
                        break  # the client leaves
            started = time.monotonic()
            assert chat(c, "다시 말해줘")["choices"][0]["message"]["content"].startswith("조각0")
            assert time.monotonic() - started < 5  # not held behind the abandoned stream
        [session] = bot.store.sessions.of_user(bot.store.users.find("떠난사람"))
        turns = bot.store.turns.of_session(session["id"], replaced=True)
        assert [(t["role"], t["mark"]) for t in turns] == [
            ("user", None),
            ("assistant", "stopped"),
            ("user", None),
            ("assistant", None),
        ]
        assert len(turns[1]["text"].split()) < 20
    finally:
        worker.stop()
        app.close()


def streamed(pieces: Iterator[str], chunks: Frames) -> tuple[list[str], list[str]]:
    """The contents of `stream`'s chunks for a reply whose first piece came at once, and its other events."""
    contents, others = [], []
    for event in stream("첫", pieces, lambda: None, "id", 0, "keem", lambda: {}, chunks):
        body = event.removeprefix("data: ").strip()
        parsed = json.loads(body) if body.startswith("{") else body
        if isinstance(parsed, dict) and parsed.get("choices") and "content" in parsed["choices"][0]["delta"]:
            contents.append(parsed["choices"][0]["delta"]["content"])
        else:
            others.append(body)
    return contents, others


def test_a_fast_models_pieces_go_out_together_a_slow_ones_each_at_once_and_nothing_is_lost_on_a_failure() -> None:
    """A model (or a loopback server) that sends its tokens at once: the pieces that came since the last chunk go in
    the next one, so 40 callers at once are not 40 x 50 chunks; one that sends a piece every 80 ms: each at once.
    A failure half-way sends what came before its error event."""
    pieces = [f"{i} " for i in range(50)]
    contents, others = streamed(iter(pieces), Frames(per_s=200, min_s=0.05))
    assert contents[:2] == ["", "첫"] and "".join(contents[2:]) == "".join(pieces) and len(contents) <= 4
    assert json.loads(others[0])["choices"][0]["finish_reason"] == "stop" and others[-1] == "[DONE]"

    def slow() -> Iterator[str]:
        for piece in ["가 ", "나 ", "다 "]:
            time.sleep(0.08)
            yield piece

    assert streamed(slow(), Frames(per_s=200, min_s=0.05))[0] == ["", "첫", "가 ", "나 ", "다 "]

    def failing() -> Iterator[str]:
        yield from ["하나 ", "둘 "]
        raise GenerationError("the server went away", code="model_server_down")

    contents, others = streamed(failing(), Frames(per_s=200, min_s=0.05))
    assert "".join(contents) == "첫하나 둘 " and json.loads(others[0])["error"]["code"] == "model_server_down"


class SlowOnce(Paced):
    """Paced, but its first reply waits 2.5 s before the first piece: longer than the client below waits."""

    slow = True
    asked = 0

    def stream(self, messages: Any, options: Any = None) -> Any:
        self.asked += 1
        if self.slow:
            self.slow = False
            time.sleep(2.5)
        yield from super().stream(messages, options)


def test_a_retry_with_its_idempotency_key_stores_nothing_twice(tmp_path: Path) -> None:
    """The openai client retries a request that timed out (the server answered, the client never heard); a stream
    the client lost half-way is asked again. With one Idempotency-Key per message, the message is stored once and
    the answer the server made is the one given; a key reused for another message, or a cut answer asked again
    after the conversation moved on, is refused with nothing stored."""
    model = SlowOnce()
    bot = make_bot(tmp_path / "keem.db", model)
    worker = Worker(bot, poll_s=0.05).start()
    app = build_app(bot, worker)
    url = launch(app)
    token = token_for(bot, "다시보낸사람")

    def turns() -> list[tuple[str, str | None]]:
        [session] = bot.store.sessions.of_user(bot.store.users.find("다시보낸사람"))
        return [(t["role"], t["mark"]) for t in bot.store.turns.of_session(session["id"], replaced=True)]

    def leave_half_way(c: httpx.Client, text: str, key: str) -> None:
        body = {"stream": True, "messages": [{"role": "user", "content": text}]}
        with c.stream("POST", "/chat/completions", json=body, headers={"Idempotency-Key": key}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i == 4:
                    break

    try:
        ai = openai.OpenAI(base_url=f"{url}v1", api_key=token, timeout=2.0, max_retries=2)
        reply = ai.chat.completions.create(
            model="keem",
            messages=[{"role": "user", "content": "천천히 답해줘"}],
            extra_headers={"Idempotency-Key": "k-1"},
        )
        assert turns() == [("user", None), ("assistant", None)] and model.asked == 1  # asked once
        said = (reply.choices[0].message.content or "").split()
        assert len(said) == 20 and said[0] == "조각0"

        with client(f"{url}v1", token) as c:
            leave_half_way(c, "길게 말해줘", "k-2")
            again = c.post(
                "/chat/completions",
                json={"messages": [{"role": "user", "content": "길게 말해줘"}]},
                headers={"Idempotency-Key": "k-2"},
            )
            assert again.status_code == 200 and len(again.json()["choices"][0]["message"]["content"].split()) == 20
            assert turns()[2:] == [("user", None), ("assistant", "replaced"), ("assistant", None)]
            asked = model.asked
            same = c.post(
                "/chat/completions",
                json={"stream": True, "messages": [{"role": "user", "content": "길게 말해줘"}]},
                headers={"Idempotency-Key": "k-2"},
            )
            replayed = "".join(
                piece
                for line in same.text.splitlines()
                if line.startswith("data: {")
                for piece in [json.loads(line[6:])["choices"][0]["delta"].get("content") or ""]
            )
            assert replayed == again.json()["choices"][0]["message"]["content"] and model.asked == asked
            assert '"replayed": true' in same.text

            other = c.post(
                "/chat/completions",
                json={"messages": [{"role": "user", "content": "딴 얘기"}]},
                headers={"Idempotency-Key": "k-2"},
            )
            assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
            for changed in (  # the same last message in another body: not a retry of it
                {"messages": [{"role": "user", "content": "안녕"}, {"role": "user", "content": "길게 말해줘"}]},
                {"model": "gpt-4o", "messages": [{"role": "user", "content": "길게 말해줘"}]},
                {"temperature": 0.2, "messages": [{"role": "user", "content": "길게 말해줘"}]},
            ):
                refused = c.post("/chat/completions", json=changed, headers={"Idempotency-Key": "k-2"})
                assert refused.status_code == 422 and refused.json()["error"]["code"] == "idempotency_key_reused"
                assert "nothing was stored" in refused.json()["error"]["message"]
            assert turns()[2:] == [("user", None), ("assistant", "replaced"), ("assistant", None)] and (
                model.asked == asked
            )
            leave_half_way(c, "또 길게", "k-3")
            chat(c, "그건 됐고")
            stale = c.post(
                "/chat/completions",
                json={"messages": [{"role": "user", "content": "또 길게"}]},
                headers={"Idempotency-Key": "k-3"},
            )
            assert stale.status_code == 409 and stale.json()["error"]["code"] == "idempotency_stale"
        users = [role for role, _ in turns() if role == "user"]
        assert len(users) == 4  # 천천히, 길게, 또 길게, 그건 됐고: each once
    finally:
        worker.stop()
        app.close()


def test_the_examples_remembering_bot_talks_and_ends_its_conversation(served: Any) -> None:
    base, _, bot, _ = served
    typed = "안녕 나는 지우야\n나는 수영을 좋아해\n"
    done = run_example("remembering_bot.py", typed, KEEM_URL=base, KEEM_TOKEN=token_for(bot, "예제사용자"))
    assert done.stdout.count("네, 잘 들었어요") == 2 and "기억을 새로 쓰는 중" in done.stdout
    [session] = bot.store.sessions.of_user(bot.store.users.find("예제사용자"))
    assert session["status"] == "ended"


def test_any_text_searches_the_memory_by_every_method_and_an_empty_memory_answers_none(served: Any) -> None:
    base, _, bot, _ = served
    assert len(ODD_QUERIES["paste"]) >= 20_000
    token_for(bot, "아무말")
    uid = bot.store.users.find(Chatbot.user_key("아무말"))
    method = bot.engine.method
    try:
        for memory in ([], ["사용자의 고양이 이름은 나비다", "사용자는 판교의 게임 회사에 다닌다"]):
            if memory:
                said = [Sentence(t) for t in memory]
                bot.engine.commit(uid, said, base=None, strategy="import", status="ok", author="import")
            for bot.engine.method in ("dense", "lexical", "hybrid"):
                # a token of its own for each method: the searches of all six would pass the rate limit
                with client(base, token_for(bot, "아무말")) as c:
                    for name, q in ODD_QUERIES.items():
                        r = c.post("/memory/search", json={"q": q, "k": 2})  # a long text goes in a body
                        assert r.status_code == 200, (bot.engine.method, name, r.text)
                        assert len(r.json()["results"]) == min(2, len(memory)), (bot.engine.method, name)
                        if name != "paste":
                            got = c.get("/memory/search", params={"q": q, "k": 2})
                            assert got.status_code == 200 and got.json()["results"] == r.json()["results"], name
    finally:
        bot.engine.method = method
    with client(base, token_for(bot, "아무말")) as c:
        r = c.post("/memory/search", json={"q": "  ", "k": 2})
        assert r.status_code == 422 and "q:" in r.json()["error"]["message"]  # only a blank text is refused
