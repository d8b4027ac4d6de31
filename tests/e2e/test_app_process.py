"""`python app.py` as people run it, one process per behaviour only a real process has: it starts, serves and stops
on SIGTERM (ending open sessions), here against a loopback server imitating Ollama (no API key) on a Space with
Hugging Face sign-in, simulated the way Gradio documents for local development (its mock signs in as the account
this machine's token belongs to; a loopback hub answers `whoami`); and a SIGKILL mid-session loses nothing.

Other servers' quirks (llama.cpp's llama-server, OpenAI) run in-process in tests/test_real_models.py and
tests/test_models.py; the page's behaviours in tests/e2e/test_browser.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from memory.store import Store
from tests.e2e.conftest import ROOT, app_process, dep, needs_chromium
from tests.e2e.helpers import server_reply
from tests.e2e.pages import open_tab
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import call, make_bot


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
    new_page: Any, tmp_path: Path
) -> None:
    """Also `python app.py` itself: it serves against a key-less local server, and SIGTERM ends open sessions."""
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
        with app_process(tmp_path, "openai:exaone3.5:7.8b", env) as (url, proc):
            laptop = new_page()
            sign_in_and_start(laptop, url, "minsu-hf")
            laptop.locator("#message-input textarea").fill("나 다음 달에 제주도로 여행 가")
            laptop.locator("#message-input textarea").press("Enter")
            laptop.get_by_test_id("bot").last.get_by_text("잘 들었어요").wait_for(timeout=20_000)
            laptop.locator("#end-button").click()
            laptop.locator("#progress").get_by_text("완료").wait_for(timeout=30_000)
            assert any("제주도" in s for s in wait_version(db, "hf:minsu-hf"))

            phone = new_page()  # another device, the same account
            sign_in_and_start(phone, url, "minsu-hf")
            open_tab(phone, "기억")
            phone.locator("#memory").get_by_text("제주도").first.wait_for(timeout=10_000)

            visitor = new_page()  # signed out: a per-browser identity
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

            # the visitor is mid-conversation when the Space stops the app (SIGTERM)
            open_tab(visitor, "대화")
            visitor.locator("#message-input textarea").fill("오늘 비가 와서 우울해")
            visitor.locator("#message-input textarea").press("Enter")
            visitor.get_by_test_id("bot").last.get_by_text("잘 들었어요").wait_for(timeout=20_000)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        assert "ended 1 open session;" in (tmp_path / "app.log").read_text()
        store = Store(db)
        try:
            names = [u["name"] for u in store.users.all()]
            [person] = [u for u in store.users.all() if u["name"].startswith("minsu-hf#")]
            [session] = store.sessions.of_user(person["id"])
            waiting = store.queue.jobs(person["id"], statuses=("pending",))
        finally:
            store.close()
        assert "hf:minsu-hf" not in names, names
        assert session["end_reason"] == "shutdown" and [j["session_id"] for j in waiting] == [session["id"]]
    assert not any(r.get("api_key") for r in server.requests)  # the key-less path: nothing else to check


SERVER = """
import sys, time
from pathlib import Path
from tests.helpers import serve
url, app, bot, worker = serve(Path(sys.argv[1]))
print(url, flush=True)
while True:
    time.sleep(1)
"""


def text_of(message: dict[str, Any]) -> str:
    """A chatbot message's text: Gradio 6 sends content as a list of typed parts."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def test_sigkill_mid_session_loses_no_shown_turn_and_the_restart_finishes_the_update(tmp_path: Path) -> None:
    from chatbot.worker import Worker

    db = tmp_path / "keem.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
    )
    try:
        url = proc.stdout.readline().decode().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:"), url
        login, send, respond = dep(url, "login"), dep(url, "send"), dep(url, "respond")  # the server's own indexes
        who = uuid.uuid4().hex
        call(url, login, ["민수"], who)
        said = "나 다음 달에 마라톤 나가! 긴장돼서 잠이 안 와"
        call(url, send, [said, None], who)
        shown = call(url, respond, [None], who)[-1]["output"]["data"][0]
        assert shown[-1]["role"] == "assistant"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    bot = make_bot(db)
    session = bot.store.sessions.all_open()[0]
    assert [t["text"] for t in bot.store.turns.of_session(session["id"])] == [text_of(m) for m in shown]
    worker = Worker(bot, poll_s=0.05).start()
    try:
        deadline = time.monotonic() + 30  # polled: a quick update costs no more; 10 s ran out at load average 12
        while bot.engine.current(session["user_id"]) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "마라톤" in " ".join(bot.engine.current(session["user_id"]).texts)
        assert bot.store.sessions.get(session["id"])["end_reason"] == "restart"
    finally:
        worker.stop(end_open=False)
