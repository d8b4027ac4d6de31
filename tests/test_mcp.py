"""KEEM's MCP server through the official SDK's client: `keem mcp --user NAME` as a real subprocess over stdio, and
the app's /mcp over streamable HTTP with API tokens. A conversation's turns go in, its end runs the memory update
on the project's fake model, the new memory is searched, a sentence is forgotten and is gone; two tokens never see
each other's memory and a bad token reaches nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.api_world import ODD_QUERIES, serve_api, token_for
from tests.erasure_world import leftovers
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import answer, run_async

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"search_memory", "list_memory", "add_turns", "end_session", "job", "why", "forget", "changes"}
SAID = [
    {"role": "user", "content": "나 다음 달에 제주도로 이사 가"},
    {"role": "assistant", "content": "와, 설레겠네요!"},
    {"role": "user", "content": "그리고 강아지를 키우기 시작했어"},
    {"role": "assistant", "content": "이름이 뭐예요?"},
]


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; AssertionError with its text when the tool answered an error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return dict(result.structured_content)


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that must fail (a tool error, not a crashed connection)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(part, "text", "") for part in result.content)


async def until_done(client: Client, job_id: int) -> int:
    """Wait for the update job with the job tool's `wait`: one call, answered once the update is done; the memory
    version it made."""
    job = await call(client, "job", job_id=job_id, wait=20)
    assert job["status"] == "done", job
    return int(job["version"])


async def remember_and_forget(client: Client) -> None:
    """The life of a memory through MCP alone: turns in, the update, search, why, changes, forget, gone."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert TOOLS <= set(tools)
    for tool in tools.values():  # each documented, with its input schema
        assert tool.description and all(p.get("description") for p in tool.input_schema["properties"].values())
    assert tools["search_memory"].input_schema["required"] == ["query"]
    assert tools["add_turns"].input_schema["properties"]["turns"]["items"]
    stored = await call(client, "add_turns", turns=SAID)
    assert len(stored["turn_ids"]) == 4
    ended = await call(client, "end_session")
    assert ended["job"]["status"] in ("pending", "running", "done")
    version = await until_done(client, ended["job"]["id"])
    assert "wait" in await refused(client, "job", job_id=ended["job"]["id"], wait=31)  # at most 30 s
    found = await call(client, "search_memory", query="제주도 이사", k=3)
    assert found["version"] == version and found["results"], found
    hit = found["results"][0]
    assert "제주도" in hit["text"] and hit["said_in"], hit  # with the date of the conversation it comes from
    for name, query in ODD_QUERIES.items():  # any text is a query: an answer, never a tool error
        assert len((await call(client, "search_memory", query=query, k=2))["results"]) == 2, name
    why = await call(client, "why", sentence_id=hit["sentence_id"])
    assert why["version"] == version and "제주도" in " ".join(q["text"] for q in why["quotes"]), why
    changed = await call(client, "changes")
    assert changed["version"] == version and changed["counts"], changed  # what the update changed, and why
    read = await client.read_resource("keem://memory")
    assert "제주도" in read.contents[0].text  # type: ignore[union-attr]
    first = await client.read_resource(f"keem://memory/versions/{version}")
    assert json.loads(first.contents[0].text)["version"] == version  # type: ignore[union-attr]

    assert "sentence_unknown" in await refused(client, "forget", sentence_id=987654)  # a tool error, not a crash
    erased = await call(client, "forget", sentence_id=hit["sentence_id"])
    assert erased["erased"] and not any("제주도" in s["text"] for s in erased["sentences"]), erased
    assert not any("제주도" in s["text"] for s in (await call(client, "list_memory"))["sentences"])
    assert not any("제주도" in r["text"] for r in (await call(client, "search_memory", query="제주도"))["results"])
    assert "제주도" not in (await client.read_resource("keem://memory")).contents[0].text  # type: ignore[union-attr]


def test_keem_mcp_over_stdio_keeps_one_users_memory_with_the_fake_model(tmp_path: Path) -> None:
    with FakeOpenAIServer(reply=lambda body: answer(body["messages"])) as model:
        env = {
            "PYTHONPATH": str(ROOT),
            "OPENAI_BASE_URL": model.url,
            "OPENAI_API_KEY": "k",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "GRADIO_ANALYTICS_ENABLED": "False",
        }
        db = tmp_path / "keem.db"
        args = ["-m", "chatbot.cli.main", "mcp", "--user", "minsu", "--db", str(db)]
        args += ["--model", "openai:fake", "--embedder", "ngram"]
        server = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))

        async def session() -> None:
            with (tmp_path / "stderr.txt").open("w") as log:
                async with Client(stdio_client(server, errlog=log)) as client:
                    await remember_and_forget(client)
                    await call(client, "add_turns", turns=[{"role": "user", "content": "오늘은 좀 피곤해"}])

        run_async(session())
    log = (tmp_path / "stderr.txt").read_text()
    assert "minsu's memory" in log and "job" in log, log  # closing the client ended the open conversation
    from memory.store import Store

    store = Store(db)
    assert [r["status"] for r in store.rows("select status from sessions order by id")] == ["ended", "ended"]
    assert store.queue.jobs(statuses=("pending",)), "the last conversation's update waits for the next start"


def test_the_apps_mcp_endpoint_takes_api_tokens_and_keeps_users_apart(tmp_path: Path) -> None:
    with serve_api(tmp_path) as (base, _app, bot, _data):
        url = base.removesuffix("/v1") + "/mcp"
        minsu, jiwoo = token_for(bot, "민수"), token_for(bot, "지우")

        def connect(token: str) -> Client:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            return Client(streamable_http_client(url, http_client=http))

        async def session() -> None:
            async with connect(minsu) as client:
                await call(client, "add_turns", turns=SAID)
                ended = await call(client, "end_session")
                version = await until_done(client, ended["job"]["id"])
                hit = (await call(client, "search_memory", query="제주도 이사"))["results"][0]
                assert "제주도" in hit["text"]
                async with connect(jiwoo) as other:  # another token: nothing of 민수's
                    assert (await call(other, "list_memory"))["sentences"] == []
                    for query in ("제주도 이사", *ODD_QUERIES.values()):  # no memory yet: no sentence, no error
                        assert (await call(other, "search_memory", query=query))["results"] == []
                    assert "not_found" in await refused(other, "forget", sentence_id=hit["sentence_id"])
                    assert "not_found" in await refused(other, "why", sentence_id=hit["sentence_id"])
                    assert "not_found" in await refused(other, "job", job_id=ended["job"]["id"])
                    with_version = await other.read_resource("keem://memory")
                    assert "제주도" not in with_version.contents[0].text  # type: ignore[union-attr]
                assert any("제주도" in s["text"] for s in (await call(client, "list_memory"))["sentences"])
                await call(client, "forget", sentence_id=hit["sentence_id"])
                left = (await call(client, "search_memory", query="제주도"))["results"]
                assert left and not any("제주도" in r["text"] for r in left)
                assert leftovers(tmp_path, "제주도") == []  # no byte of it in the database, its WAL or a cache
                assert version >= 1

        run_async(session())

        _, app_token = bot.store.tokens.create(None, app=True, label="agents")

        async def as_app() -> None:  # an app token acts for the user ?user= names
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {app_token}"}, timeout=30)
            async with Client(streamable_http_client(url + "?user=%EB%AF%BC%EC%88%98", http_client=http)) as client:
                assert "강아지" in json.dumps((await call(client, "list_memory"))["sentences"], ensure_ascii=False)

        run_async(as_app())
        r = httpx.post(url, headers={"Authorization": f"Bearer {app_token}"}, json={}, timeout=10)
        assert r.status_code == 422 and r.json()["error"]["code"] == "token_needs_user", r.text

        # an MCP session opened with one token answers another token as if it did not exist (the SDK's 404)
        accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        client_info = {"name": "test", "version": "1"}
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info},
        }
        opened = httpx.post(url, headers={**accept, "Authorization": f"Bearer {minsu}"}, json=hello, timeout=10)
        assert opened.status_code == 200, opened.text
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        theirs = {**accept, "Authorization": f"Bearer {jiwoo}", "mcp-session-id": opened.headers["mcp-session-id"]}
        assert httpx.post(url, headers=theirs, json=listing, timeout=10).status_code == 404
        mine = {**theirs, "Authorization": f"Bearer {minsu}"}
        assert httpx.post(url, headers=mine, json=listing, timeout=10).status_code == 200  # its own token is served

        for token in (None, "keem_not-a-token"):  # refused before the SDK sees anything: the API's 401
            headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            r = httpx.post(url, headers=headers, json=hello, timeout=10)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
            assert r.json()["error"]["code"] == ("token_invalid" if token else "token_missing")
        assert bot.store.versions.latest(bot.store.users.find("지우") or 0) is None
