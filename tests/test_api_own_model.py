"""KEEM's memory beside a builder's own model: turns stored with POST /v1/sessions/messages become memory as KEEM's own
conversations do, the prompt for a due reply holds that memory, GET /v1/memory/search finds it; a batch is stored
whole or not at all, once per Idempotency-Key, whole under concurrent callers; a user trial refuses it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from chatbot.api.app import build_api
from chatbot.bot import Chatbot
from chatbot.study import give_consent, study_from_dict
from chatbot.web.backend import AppContext, Backend
from chatbot.worker import Worker
from tests.api_world import client, code, end_and_wait, run_example, serve_api, token_for
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import PLAN, make_bot


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Chatbot, Path]]:
    with serve_api(tmp_path_factory.mktemp("own") / "data") as served:
        yield served


def turns(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": role, "content": text} for role, text in pairs]}


def stored(bot: Chatbot, name: str) -> list[tuple[str, str]]:
    user_id = bot.store.users.find(name)
    rows = bot.store.rows("select role, text from turns where user_id = ? order by id", [user_id])
    return [(r["role"], r["text"]) for r in rows]


def test_own_model_turns_become_memory_and_the_next_prompt_and_search_hold_it(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "자기모델")) as c:
        first = turns(
            ("system", "너는 친절한 봇이야"),
            ("user", "나는 고양이 두 마리를 키워"),
            ("assistant", "고양이 이름이 뭐예요?"),
            ("user", "나비랑 까망이야"),
            ("assistant", "예쁜 이름이네요"),
        )
        r = c.post("/sessions/messages", json=first)
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["skipped"] == 1 and len(body["turn_ids"]) == 4 and "prompt" not in body  # no reply is due
        session_id = body["session_id"]
        transcript = c.get(f"/sessions/{session_id}").json()["turns"]
        assert [(t["role"], t["text"]) for t in transcript] == [
            (m["role"], m["content"]) for m in first["messages"][1:]
        ]
        end_and_wait(c)

        memory = c.get("/memory").json()
        cats = [s for s in memory["sentences"] if "고양이 두 마리" in s["text"]]
        assert cats, memory
        found = c.get("/memory/search", params={"q": "고양이 두 마리를 키워", "k": 2}).json()["results"]
        assert found[0]["sentence_id"] == cats[0]["id"] and found[0]["text"] == cats[0]["text"]

        r = c.post("/sessions/messages", json=turns(("user", "우리 고양이가 아파")))
        assert r.status_code == 201, r.text
        due = r.json()
        assert due["session_id"] != session_id  # the ended conversation's update made the memory; this is the next
        prompt = due["prompt"]
        assert prompt[0]["role"] == "system" and cats[0]["text"] in prompt[0]["content"]
        assert prompt[-1]["role"] == "user" and "우리 고양이가 아파" in prompt[-1]["content"]
        assert cats[0]["text"] in [m["text"] for m in due["memory"]]
        assert c.post("/sessions/messages", json=turns(("assistant", "병원에 가 보셨어요?"))).status_code == 201
    assert stored(bot, "자기모델")[-2:] == [("user", "우리 고양이가 아파"), ("assistant", "병원에 가 보셨어요?")]


def test_a_batch_is_stored_whole_or_not_at_all_and_says_which_message_is_wrong(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "한꺼번에")) as c:
        r = c.post("/sessions/messages", json=turns(("user", "좋아"), ("assistant", "  \u200b ")))
        assert r.status_code == 422 and code(r) == "empty_message"
        error = r.json()["error"]
        assert "messages[1]" in error["message"] and error["params"]["index"] == 1
        r = c.post("/sessions/messages", json=turns(("user", "좋아"), ("user", "가" * 5000)))
        assert r.status_code == 413 and code(r) == "message_too_long" and r.json()["error"]["params"]["index"] == 1
        r = c.post("/sessions/messages", json=turns(("system", "규칙"), ("tool", "{}")))
        assert r.status_code == 422 and code(r) == "bad_body"
        assert stored(bot, "한꺼번에") == []  # the good first message of a refused batch is not kept either
        assert c.post("/sessions/messages", json=turns(("user", "좋아"))).status_code == 201
    assert stored(bot, "한꺼번에") == [("user", "좋아")]


def test_a_batch_retried_with_its_idempotency_key_is_stored_once(served: Any) -> None:
    base, _, bot, _ = served
    batch = turns(("user", "내일 면접이야"), ("assistant", "떨리겠어요"))
    with client(base, token_for(bot, "다시보냄")) as c:
        first = c.post("/sessions/messages", json=batch, headers={"Idempotency-Key": "k-1"})
        again = c.post("/sessions/messages", json=batch, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == 201 and again.status_code == 200, again.text
        assert again.json()["replayed"] is True and again.json()["turn_ids"] == first.json()["turn_ids"]
        other = c.post("/sessions/messages", json=turns(("user", "다른 말")), headers={"Idempotency-Key": "k-1"})
        assert other.status_code == 422 and code(other) == "idempotency_key_reused"
        named = {"messages": [{**m, "name": "지우"} for m in batch["messages"]]}  # the same words, another body
        assert code(c.post("/sessions/messages", json=named, headers={"Idempotency-Key": "k-1"})) == (
            "idempotency_key_reused"
        )
        as_chat = {"messages": [{"role": "user", "content": "내일 면접이야"}]}  # one key on another endpoint
        assert code(c.post("/chat/completions", json=as_chat, headers={"Idempotency-Key": "k-1"})) == (
            "idempotency_key_reused"
        )
        respaced = (
            '{ "messages" : [ {"content": "내일 면접이야", "role": "user"}, '
            '{"content": "떨리겠어요", "role": "assistant"} ] }'
        )
        again = c.post(
            "/sessions/messages",
            content=respaced.encode(),
            headers={"Idempotency-Key": "k-1", "Content-Type": "application/json"},
        )
        assert again.status_code == 200 and again.json()["replayed"] is True  # key order and spacing are no change
        asked = turns(("user", "면접 잘 볼 수 있을까?"))  # the answer with the prompt was lost: the retry has it too
        first = c.post("/sessions/messages", json=asked, headers={"Idempotency-Key": "k-2"}).json()
        again = c.post("/sessions/messages", json=asked, headers={"Idempotency-Key": "k-2"}).json()
        assert again["replayed"] is True and again["prompt"] == first["prompt"] and again["prompt"]
        c.post("/sessions/messages", json=turns(("assistant", "물론이죠")))
        assert "prompt" not in c.post("/sessions/messages", json=asked, headers={"Idempotency-Key": "k-2"}).json()
    assert stored(bot, "다시보냄") == [
        ("user", "내일 면접이야"),
        ("assistant", "떨리겠어요"),
        ("user", "면접 잘 볼 수 있을까?"),
        ("assistant", "물론이죠"),
    ]


def test_batches_sent_at_once_by_two_callers_of_one_user_each_stay_whole(served: Any) -> None:
    base, _, bot, _ = served
    token = token_for(bot, "동시기록")
    start, errors = threading.Barrier(2), []

    def send(who: str) -> None:
        try:
            with client(base, token) as c:
                start.wait()
                for i in range(5):
                    r = c.post(
                        "/sessions/messages", json=turns(("user", f"{who} 질문 {i}"), ("assistant", f"{who} 답 {i}"))
                    )
                    assert r.status_code == 201, r.text
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(who,)) for who in ("가", "나")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with client(base, token) as c:
        end_and_wait(c)
        [past] = c.get("/sessions").json()["sessions"]
        transcript = [t["text"] for t in c.get(f"/sessions/{past['id']}").json()["turns"]]
    assert len(transcript) == 20
    for question, reply in zip(transcript[::2], transcript[1::2]):
        assert reply == question.replace("질문", "답")  # each reply right after its own message


def test_search_is_the_callers_memory_only_and_refuses_an_empty_text(served: Any) -> None:
    base, _, bot, _ = served
    with client(base, token_for(bot, "검색주인")) as c:
        assert c.post("/sessions/messages", json=turns(("user", "내 자전거는 초록색 삼천리야"))).status_code == 201
        end_and_wait(c)
        assert "초록색" in c.get("/memory/search", params={"q": "자전거"}).json()["results"][0]["text"]
        for params in ({"q": "  "}, {"q": "자전거", "k": 0}, {}):
            r = c.get("/memory/search", params=params)
            assert r.status_code == 422 and code(r) == "bad_body", params
    with client(base, token_for(bot, "검색남")) as c:
        assert c.get("/memory/search", params={"q": "초록색 자전거"}).json()["results"] == []


def test_a_user_trial_takes_no_turns_of_another_model(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "keem.db")
    study = study_from_dict({**PLAN, "api": True})
    user_id = bot.store.users.get_or_create("P001")
    give_consent(bot.store, user_id, study)
    _, secret = bot.store.tokens.create(user_id)
    api = build_api(AppContext(Backend(bot, Worker(bot)), study=study))
    with TestClient(api) as c:
        r = c.post("/sessions/messages", json=turns(("user", "안녕")), headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 403 and code(r) == "study_own_model"
    assert stored(bot, "P001") == []


def test_the_examples_own_model_bot_answers_with_its_model_and_keem_keeps_the_turns(served: Any) -> None:
    base, _, bot, _ = served
    with FakeOpenAIServer(reply=lambda body: f"내 모델: {body['messages'][-1]['content'][-6:]}") as own:
        done = run_example(
            "own_model_bot.py",
            "안녕 나는 지우야\n\n나는 수영을 좋아해\n",
            KEEM_URL=base,
            KEEM_TOKEN=token_for(bot, "내모델예제"),
            OPENAI_BASE_URL=own.url,
            MODEL="mine",
        )
    assert done.stdout.count("내 모델: ") == 2 and "기억을 새로 쓰는 중" in done.stdout
    asked = [r for r in own.requests if r.get("messages")]
    assert len(asked) == 2 and asked[0]["model"] == "mine" and asked[0]["messages"][0]["role"] == "system"
    said = stored(bot, "내모델예제")
    assert [role for role, _ in said] == ["user", "assistant", "user", "assistant"]
    assert said[1][1].startswith("내 모델: ") and said[2] == ("user", "나는 수영을 좋아해")
