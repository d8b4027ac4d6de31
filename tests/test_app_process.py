"""`python app.py` as people run it, in its own process on 127.0.0.1: against loopback servers imitating Ollama and
llama.cpp's llama-server (no API key), and on a Space with Hugging Face sign-in, simulated the way Gradio documents
for local development (its mock signs in as the account this machine's token belongs to; here a loopback hub
answers `whoami`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory.store import Store
from tests.fake_openai import FakeOpenAIServer
from tests.test_browser import browser, needs_chromium, open_tab  # noqa: F401  (browser is a fixture)
from tests.test_ui import answer, call, free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # each test starts the app in a new process (about 10 s on 2 cores)


def server_reply(body: dict) -> str:
    return answer(body["messages"])


@contextmanager
def app_process(tmp_path: Path, model: str, env: dict[str, str]) -> Iterator[str]:
    """`python app.py --model MODEL` with the n-gram embedder on a free port; yields its URL once it answers."""
    port = free_port()
    log = (tmp_path / "app.log").open("w")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KEEM_", "OPENAI_", "SPACE", "OAUTH_"))}
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--model", model, "--embedder", "ngram", "--db", str(tmp_path / "keem.db")]
        + ["--port", str(port)],
        cwd=ROOT,
        env={**clean, "GRADIO_ANALYTICS_ENABLED": "False", **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "app.log").read_text()
            try:
                if httpx.get(url + "config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("the app did not start: " + (tmp_path / "app.log").read_text())
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def dep(url: str, name: str) -> int:
    deps = httpx.get(url + "config", timeout=5).json()["dependencies"]
    return next(i for i, d in enumerate(deps) if d.get("api_name") == name)


def login_when_ready(url: str, who: str, name: str, timeout: float = 90) -> None:
    """Log in once the models are ready (until then the app answers that they are loading)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "안녕하세요" in json.dumps(call(url, dep(url, "login"), [name], who), ensure_ascii=False):
            return
        time.sleep(0.5)
    raise AssertionError("the app never became ready")


def wait_version(db: Path, user: str, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        store = Store(db)
        try:
            users = [u for u in store.users.all() if u["name"] == user]
            versions = store.versions.of_user(users[0]["id"]) if users else []
            if versions:
                return [s.text for s in versions[-1].sentences]
        finally:
            store.close()
        time.sleep(0.3)
    raise AssertionError(f"no memory version for {user}")


@pytest.mark.parametrize("flavor", ["ollama", "llama-server"])
def test_the_app_chats_and_updates_memory_against_a_local_server_without_a_key(tmp_path: Path, flavor: str) -> None:
    with FakeOpenAIServer(server_reply, flavor=flavor) as server:
        env = {"OPENAI_BASE_URL": server.url, "KEEM_OPENAI_CONTEXT": "8192"}
        with app_process(tmp_path, "openai:exaone3.5:7.8b", env) as url:
            who = uuid.uuid4().hex
            login_when_ready(url, who, "민수")
            said = "나 지난주에 부산으로 이사했어"
            call(url, dep(url, "send"), [said, None], who)
            shown = call(url, dep(url, "respond"), [None], who)[-1]["output"]["data"][0]
            reply = shown[-1]["content"]
            text = reply if isinstance(reply, str) else "".join(p.get("text", "") for p in reply)
            assert shown[-1]["role"] == "assistant" and "네, 잘 들었어요" in text, shown
            call(url, dep(url, "logout"), [None], who)  # leaving ends the session and queues its update
            memory = wait_version(tmp_path / "keem.db", "민수")
            assert any("부산" in s for s in memory), memory
    assert not any(r.get("api_key") for r in server.requests)  # the key-less path: nothing else to check


class FakeHub:
    """Answers the hub's `whoami` on 127.0.0.1, as for a machine logged in to Hugging Face as `username`."""

    def __init__(self, username: str):
        user = {"type": "user", "name": username, "fullname": "김민수", "avatarUrl": "", "orgs": []}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps(user if self.path.startswith("/api/whoami") else {}).encode()
                self.send_response(200 if self.path.startswith("/api/whoami") else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeHub:
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()


def sign_in_and_start(page: Any, url: str, username: str) -> None:
    page.goto(url)
    page.locator("#hf-login-button").click()  # the mock signs in and comes back to the page
    page.locator("#hf-login-button").get_by_text(f"로그아웃 ({username})").wait_for(timeout=20_000)
    box = page.locator("#name-input textarea, #name-input input").first
    page.wait_for_function(
        "n => { const b = document.querySelector('#name-input textarea, #name-input input');"
        " return b && b.value === n && b.disabled; }",
        arg=username,
        timeout=15_000,
    )
    assert box.input_value() == username
    page.locator("#start-button").click()
    page.locator("#greeting").get_by_text(username).wait_for(timeout=15_000)


@needs_chromium
def test_signed_in_with_hugging_face_the_memory_follows_the_account_and_a_visitor_keeps_a_browser_identity(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "keem.db"
    with FakeHub("minsu-hf") as hub, FakeOpenAIServer(server_reply, flavor="ollama") as server:
        env = {
            "OPENAI_BASE_URL": server.url,
            "KEEM_HF_LOGIN": "1",  # what `hf_oauth: true` turns on in a Space
            "KEEM_IDENTITY": "browser",  # a public Space's identity for visitors who do not sign in
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": "hf_test_token",
            "HF_HUB_OFFLINE": "0",  # the hub is the loopback one
        }
        with app_process(tmp_path, "openai:exaone3.5:7.8b", env) as url:
            laptop = browser.new_context(locale="ko-KR").new_page()
            sign_in_and_start(laptop, url, "minsu-hf")
            laptop.locator("#message-input textarea").fill("나 다음 달에 제주도로 여행 가")
            laptop.locator("#message-input textarea").press("Enter")
            laptop.get_by_test_id("bot").last.get_by_text("잘 들었어요").wait_for(timeout=20_000)
            laptop.locator("#end-button").click()
            laptop.locator("#progress").get_by_text("완료").wait_for(timeout=30_000)
            assert any("제주도" in s for s in wait_version(db, "hf:minsu-hf"))

            phone = browser.new_context(locale="ko-KR").new_page()  # another device, the same account
            sign_in_and_start(phone, url, "minsu-hf")
            open_tab(phone, "기억")
            phone.locator("#memory").get_by_text("제주도").first.wait_for(timeout=10_000)

            visitor = browser.new_context(locale="ko-KR").new_page()  # signed out: a per-browser identity
            visitor.goto(url)
            visitor.locator("#hf-login-button").get_by_text("Hugging Face로 로그인").wait_for(timeout=15_000)
            visitor.locator("#name-input textarea, #name-input input").first.fill("minsu-hf")
            visitor.locator("#start-button").click()
            visitor.locator("#greeting").get_by_text("minsu-hf").wait_for(timeout=15_000)
            open_tab(visitor, "기억")
            visitor.locator("#memory").get_by_text("아직 기억이 없습니다").wait_for(timeout=10_000)
            assert "제주도" not in visitor.content()

            # the signed-in user can still forget everything (confirming with the account name)
            phone.get_by_text("나를 잊기 (모든 데이터 삭제)").click()
            phone.locator("#forget-confirm textarea, #forget-confirm input").first.fill("minsu-hf")
            phone.locator("#forget-button").click()
            phone.locator("#start-button").wait_for(timeout=15_000)
        store = Store(db)
        try:
            names = [u["name"] for u in store.users.all()]
        finally:
            store.close()
        assert "hf:minsu-hf" not in names and any(n.startswith("minsu-hf#") for n in names), names


@needs_chromium
def test_on_zerogpu_the_demo_app_replies_and_updates_inside_gpu_calls(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """The acceptance run: the stand-in `spaces` package reports ZeroGPU and `python app.py --model demo` serves."""
    log = tmp_path / "spaces.jsonl"
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "zerogpu_stub"), str(ROOT)]),
        "SPACES_ZERO_GPU": "true",
        "SPACES_STUB_LOG": str(log),
        # one short model call per update: the 135M demo model makes 3-10 tokens a second on 2 busy CPU cores, and
        # it rambles to its budget (cut, retried at twice that, then the never-lose fallback keeps the user's words)
        "KEEM_STRATEGY": "accumulate",
        "KEEM_REPLY_MAX_TOKENS": "24",
        "KEEM_UPDATE_MAX_TOKENS": "24",
    }
    with app_process(tmp_path, "demo", env) as url:
        page = browser.new_context(locale="ko-KR").new_page()
        page.goto(url)
        page.locator("#start-button").get_by_text("대화 시작").wait_for(timeout=120_000)
        page.locator("#name-input textarea, #name-input input").first.fill("민수")
        page.locator("#start-button").click()
        box = page.locator("#message-input textarea")
        box.wait_for(state="visible", timeout=15_000)
        box.fill("I moved to Busan last week.")
        box.press("Enter")
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('[data-testid=bot]');"
            " return b.length && b[b.length-1].innerText.trim().length > 1 && b[b.length-1].innerText != '…'; }",
            timeout=120_000,
        )
        page.locator("#end-button").click()
        page.locator("#progress").get_by_text("완료").wait_for(timeout=240_000)
        open_tab(page, "기억")
        page.locator("#memory").get_by_text("현재 기억 v1").wait_for(timeout=15_000)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    ran = {e["function"] for e in events if e["event"] == "end"}
    assert {"keem_reply", "keem_update"} <= ran, events
    assert events[0]["event"] == "import" and not events[0]["torch_loaded"]
