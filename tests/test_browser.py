"""The app in a real browser (system chromium via Playwright): chat, end session, memory panel, restart, isolation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from models.base import GenerationOptions, Message
from models.fake import ScriptedChatModel
from tests.test_ui import answer, call, dep_index, make_bot, serve

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot.png"

pytestmark = pytest.mark.slow
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),  # CI must run them
    reason=f"{CHROMIUM} is missing: apt-get install -y chromium fonts-nanum",
)


class SlowModel(ScriptedChatModel):
    """The scripted model, with a pause between chat pieces so streaming is visible in the page."""

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Iterator[str]:
        chat = "당신은 사용자와" in messages[0]["content"]
        for piece in super().stream(messages, options):
            if chat:
                time.sleep(0.08)
            yield piece


def korean_reply(messages: list[Message]) -> str:
    if "당신은 사용자와" in messages[0]["content"]:
        return "우와, 부산으로 이사했군요! 바다가 보이는 집이라니 정말 멋져요. 새 동네는 어때요?"
    return answer(messages)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def start_app(db: Path) -> tuple[str, Any, Any]:
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    url, app, bot, worker = serve(db, model=SlowModel(responder=korean_reply))
    return url, app, Stopper(worker, bot)


class Stopper:
    """Stops the worker, then closes the store, as the app's shutdown does."""

    def __init__(self, worker: Any, bot: Any):
        self.worker, self.bot = worker, bot

    def stop(self) -> None:
        self.worker.stop()
        self.bot.store.close()


def enter(page: Any, url: str, name: str) -> None:
    page.goto(url)
    page.locator("#name-input textarea, #name-input input").first.fill(name)
    page.locator("#start-button").click()
    page.locator("#message-input textarea").wait_for(state="visible", timeout=15_000)
    page.locator("#greeting").get_by_text(name).wait_for(timeout=15_000)


def open_tab(page: Any, name: str) -> None:
    """Click a tab until it is the selected one (a click during a re-render can be lost)."""
    tab = page.get_by_role("tab", name=name)
    for _ in range(20):
        tab.click()
        if tab.get_attribute("aria-selected") == "true":
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"tab {name} would not open")


@needs_chromium
def test_chat_end_session_restart_and_isolation(browser: Any, tmp_path: Path) -> None:
    db = tmp_path / "keem.db"
    url, app, worker = start_app(db)
    try:
        page = browser.new_context(locale="ko-KR", viewport={"width": 1200, "height": 900}).new_page()
        enter(page, url, "민수")
        page.locator("#message-input textarea").fill("나 지난주에 부산으로 이사했어. 바다가 보여서 너무 좋아!")
        page.locator("#message-input textarea").press("Enter")
        bot = page.get_by_test_id("bot").last
        bot.wait_for(timeout=15_000)
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('[data-testid=bot]');"
            " return b.length && b[b.length-1].innerText.includes('우와'); }",
            timeout=15_000,
        )
        partial = bot.inner_text()
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('[data-testid=bot]');"
            " return b.length && b[b.length-1].innerText.includes('어때요?'); }",
            timeout=30_000,
        )
        assert len(partial) < len(bot.inner_text())  # seen while still streaming
        assert "부산" in page.get_by_test_id("user").last.inner_text()

        started = time.perf_counter()
        page.locator("#end-button").click()
        page.locator("#progress").get_by_text("기억 갱신").wait_for(timeout=5_000)
        assert time.perf_counter() - started < 5
        page.locator("#progress").get_by_text("완료").wait_for(timeout=30_000)
        open_tab(page, "기억")
        page.locator("#memory").get_by_text("현재 기억 v1").wait_for(timeout=10_000)
        assert "부산" in page.locator("#memory").inner_text()
        assert "v1" in page.locator("#history").inner_text()

        # a second session uses the memory; the screenshot shows the chat with the memory it used
        open_tab(page, "대화")
        page.locator("#new-session-button").click()
        page.locator("#message-input textarea").fill("오늘은 바다 산책을 했어")
        page.locator("#message-input textarea").press("Enter")
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('[data-testid=bot]');"
            " return b.length && b[b.length-1].innerText.includes('어때요?'); }",
            timeout=30_000,
        )
        page.locator("#hits-accordion").get_by_text("이번 답변에 쓰인 기억").click()
        page.locator("#hits").get_by_text("부산").first.wait_for(timeout=10_000)
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        # another person in another browser context sees nothing of 민수
        other = browser.new_context(locale="ko-KR").new_page()
        enter(other, url, "영희")
        open_tab(other, "기억")
        other.locator("#memory").get_by_text("아직 기억이 없습니다").wait_for(timeout=10_000)
        seen = other.content()
        for word in ("부산", "민수"):
            assert word not in seen, seen[max(0, seen.find(word) - 200) : seen.find(word) + 100]
    finally:
        app.close()
        worker.stop()

    # the app restarts on the same database: the session the shutdown ended was updated at start (v2),
    # and 민수 sees that memory
    url, app, worker = start_app(db)
    try:
        page = browser.new_context(locale="ko-KR").new_page()
        enter(page, url, "민수")
        open_tab(page, "기억")
        page.locator("#memory").get_by_text("현재 기억 v2").wait_for(timeout=10_000)
        assert "부산" in page.locator("#memory").inner_text() and "산책" in page.locator("#memory").inner_text()
        # edit a sentence in the page: a new version written by the user
        page.get_by_text("문장 고치기 · 지우기 · 추가").click()
        page.locator("#pick input").click()
        page.get_by_role("option").filter(has_text="산책").click()
        page.locator("#edit-text textarea").fill("사용자는 매일 저녁 바다 산책을 한다.")
        page.locator("#edit-button").click()
        page.locator("#memory").get_by_text("현재 기억 v3").wait_for(timeout=10_000)
        assert "사용자 직접 수정" in page.locator("#history").inner_text()
        assert "매일 저녁" in page.locator("#memory").inner_text()
        page.screenshot(path=str(SCREENSHOT.with_name("screenshot-memory.png")), full_page=True)
    finally:
        app.close()
        worker.stop()
    assert SCREENSHOT.stat().st_size > 10_000


@needs_chromium
def test_browser_identity_survives_a_reload_and_a_stranger_typing_the_name_sees_nothing(
    browser: Any, tmp_path: Path
) -> None:
    from memory.store import Sentence

    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    url, app, bot, worker = serve(tmp_path / "keem.db", browser_identity=True)
    try:
        page = browser.new_context(locale="ko-KR").new_page()
        enter(page, url, "민수")
        [user] = [u for u in bot.store.users.all() if u["name"].startswith("민수#")]
        bot.engine.commit(
            user["id"],
            [Sentence("사용자는 부산으로 이사했다")],
            base=None,
            strategy="keem",
            status="ok",
            author="updater",
        )
        enter(page, url, "민수")  # a new page load in the same browser
        open_tab(page, "기억")
        page.locator("#memory").get_by_text("부산").wait_for(timeout=10_000)
        stranger = browser.new_context(locale="ko-KR").new_page()
        enter(stranger, url, "민수")  # someone else types the same name
        open_tab(stranger, "기억")
        stranger.locator("#memory").get_by_text("아직 기억이 없습니다").wait_for(timeout=10_000)
        assert len([u for u in bot.store.users.all() if u["name"].startswith("민수#")]) == 2
    finally:
        app.close()
        worker.stop()


@needs_chromium
def test_bad_input_in_the_page_shows_a_message_and_the_app_stays_usable(browser: Any, tmp_path: Path) -> None:
    url, app, worker = start_app(tmp_path / "keem.db")
    try:
        page = browser.new_context(locale="ko-KR").new_page()
        page.goto(url)
        page.locator("#name-input textarea, #name-input input").first.fill("<b>x</b>")
        page.locator("#start-button").click()
        page.get_by_text("이름은 1~64자").first.wait_for(timeout=10_000)
        enter(page, url, "민수")
        page.locator("#message-input textarea").fill("   ")
        page.locator("#send-button").click()
        page.get_by_text("빈 메시지입니다").first.wait_for(timeout=10_000)
        page.locator("#message-input textarea").fill("안녕")
        page.locator("#send-button").click()
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('[data-testid=bot]');"
            " return b.length && b[b.length-1].innerText.includes('어때요?'); }",
            timeout=30_000,
        )
        assert "Traceback" not in page.content()
    finally:
        app.close()
        worker.stop()


def bot_texts(page: Any) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('[data-testid=bot]')].map(b => b.innerText)")


@needs_chromium
def test_a_message_sent_while_a_reply_is_coming_is_answered_and_a_draft_survives(browser: Any, tmp_path: Path) -> None:
    """Issue 10: with a slow model server, a second message sent 0.5 s after the first was thrown away (in a load
    run one typed turn in 102), and a draft typed while a reply streamed was wiped when it ended."""
    from models.openai_backend import OpenAIChatModel
    from tests.fake_openai import FakeOpenAIServer

    def reply(body: dict) -> str:
        messages = body["messages"]
        if "당신은 사용자와" in messages[0]["content"]:
            return f"네, «{messages[-1]['content'][:6]}» 잘 들었어요. 조금 더 이야기해 주세요."
        return answer(messages)

    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    with FakeOpenAIServer(reply, latency_s=2.0) as server:  # every answer starts 2 s after it was asked
        model = OpenAIChatModel("fake-slow", base_url=server.url, api_key="test")
        url, app, bot, worker = serve(tmp_path / "keem.db", model=model)  # type: ignore[arg-type]
        try:
            page = browser.new_context(locale="ko-KR").new_page()
            enter(page, url, "민수")
            box = page.locator("#message-input textarea")
            box.fill("첫 번째: 오늘 면접을 봤어")
            box.press("Enter")
            page.wait_for_timeout(500)
            assert not any("잘 들었어요" in t for t in bot_texts(page))  # the first reply is still coming
            box.fill("두 번째: 결과는 다음 주에 나와")
            box.press("Enter")
            page.locator("#pending-note").get_by_text("답변을 기다리는 메시지 1개").wait_for(timeout=5_000)
            assert box.input_value() == ""  # accepted, so the box cleared
            assert "두 번째" in page.get_by_test_id("user").last.inner_text()  # shown at once, waiting
            box.fill("아직 쓰는 중인 초안")  # typed while the replies stream
            page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=bot]')]"
                ".filter(b => b.innerText.includes('잘 들었어요')).length == 2",
                timeout=20_000,
            )
            page.locator("#pending-note").get_by_text("답변을 기다리는").wait_for(state="detached", timeout=5_000)
            page.wait_for_timeout(500)  # any last frame has landed
            assert box.input_value() == "아직 쓰는 중인 초안"  # the draft survived the replies
            texts = bot_texts(page)
            assert "«첫 번째: " in texts[-2] and "«두 번째: " in texts[-1], texts
            [session] = bot.store.sessions.all_open()
            turns = bot.store.turns.of_session(session["id"])
            assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
            assert [turns[0]["text"], turns[2]["text"]] == [
                "첫 번째: 오늘 면접을 봤어",
                "두 번째: 결과는 다음 주에 나와",
            ]
            # the banner names the server's address as written, not "127\.0\.0\.1"
            banner = page.locator("#model-banner").inner_text()
            assert f"fake-slow at {server.url}" in banner and "\\" not in banner, banner
        finally:
            app.close()
            worker.stop()


SERVER = """
import sys, time
from pathlib import Path
from tests.test_ui import serve
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
    from chatbot.web.app import build_app
    from chatbot.worker import Worker

    db = tmp_path / "keem.db"
    app = build_app(make_bot(tmp_path / "index.db"))  # same code as the server, so the same event indexes
    login, send, respond = dep_index(app, "login"), dep_index(app, "send"), dep_index(app, "respond")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(db)],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
    )
    try:
        url = proc.stdout.readline().decode().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:"), url
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
        deadline = time.monotonic() + 10
        while bot.engine.current(session["user_id"]) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "마라톤" in " ".join(bot.engine.current(session["user_id"]).texts)
        assert bot.store.sessions.get(session["id"])["end_reason"] == "restart"
    finally:
        worker.stop(end_open=False)
