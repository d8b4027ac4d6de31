"""Two chromium tabs of one user: one forgets (on the page, or `keem memory forget` in another process), a new
visitor chats, and the other tab's next message gets the deletion notice and the start screen, nothing of the
new visitor (issue 18, item 1; tests/test_identity.py has the same through the handlers)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from models.base import GenerationOptions, Message
from models.fake import ScriptedChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import NOTICE, forget_on_page, send
from tests.helpers import answer, serve

ROOT = Path(__file__).resolve().parents[2]
B_WORDS = "파란우산힌트"

pytestmark = needs_chromium


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[str, Any, Path]]:
    db = tmp_path / "keem.db"
    url, blocks, bot, worker = serve(db)
    yield url, bot, db
    worker.stop()
    blocks.close()
    bot.store.close()


class HeldModel(ScriptedChatModel):
    """The scripted model; a chat reply streams its first piece, then waits for `go` (a forget lands meanwhile)."""

    def __init__(self) -> None:
        super().__init__(responder=answer)
        self.go, self.held = threading.Event(), threading.Event()

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Iterator[str]:
        chat = "당신은 사용자와" in messages[0]["content"]
        for n, piece in enumerate(super().stream(messages, options)):
            yield piece
            if chat and n == 0:
                self.held.set()
                self.go.wait(30)


def tab(browser: Any, url: str, name: str) -> Any:
    page = browser.new_context(locale="ko-KR", viewport={"width": 1200, "height": 900}).new_page()
    page.goto(url)
    page.locator("#name-input textarea, #name-input input").first.fill(name)
    page.locator("#start-button").click()
    page.locator("#message-input textarea").wait_for(state="visible", timeout=15_000)
    page.locator("#greeting").get_by_text(name).wait_for(timeout=15_000)
    return page


def chat_with_reply(page: Any, text: str) -> None:
    send(page, text)
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=bot]').length > 0 && "
        "!document.querySelector('#chat').innerText.includes('…')",
        timeout=15_000,
    )


def assert_told_and_nothing_crossed(other: Any, bot: Any) -> None:
    query = "select role, text from turns where user_id = (select id from users where name = 'userB')"
    for _ in range(100):  # userB's reply is stored when its stream ends, which may come after the page shows it
        b_turns = bot.store.rows(query)
        if any(t["role"] == "assistant" for t in b_turns):
            break
        time.sleep(0.1)
    send(other, "탭 2의 메시지")
    other.get_by_text(NOTICE).first.wait_for(timeout=15_000)
    other.locator("#start-button").wait_for(state="visible", timeout=15_000)
    assert other.locator("#main").is_hidden()
    assert B_WORDS not in other.content()
    assert bot.store.rows(query) == b_turns
    assert bot.store.rows("select * from turns where text = '탭 2의 메시지'") == []


def test_the_other_tab_of_a_user_forgotten_on_the_page_is_told_and_sees_nothing_of_the_next(
    browser: Any, app: tuple[str, Any, Path]
) -> None:
    url, bot, _ = app
    first, second = tab(browser, url, "userA"), tab(browser, url, "userA")
    chat_with_reply(first, "나 고양이 키워")
    a_id = bot.store.users.find("userA")
    forget_on_page(first, "userA")
    visitor = tab(browser, url, "userB")
    chat_with_reply(visitor, f"내 힌트는 {B_WORDS}")
    assert bot.store.users.find("userB") != a_id
    assert_told_and_nothing_crossed(second, bot)


def test_the_tabs_of_a_user_forgotten_by_keem_memory_forget_are_told(browser: Any, app: tuple[str, Any, Path]) -> None:
    url, bot, db = app
    first, second = tab(browser, url, "userA"), tab(browser, url, "userA")
    chat_with_reply(first, "나 고양이 키워")
    a_id = bot.store.users.find("userA")
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", "memory", "forget", "--user", "userA", "--yes", "--db", str(db)],
        cwd=ROOT,
        env={**os.environ, "KEEM_BACKUP_DIR": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    visitor = tab(browser, url, "userB")
    chat_with_reply(visitor, f"내 힌트는 {B_WORDS}")
    assert bot.store.users.find("userB") != a_id
    assert_told_and_nothing_crossed(second, bot)
    assert_told_and_nothing_crossed(first, bot)


def test_a_reply_streaming_when_its_user_is_forgotten_in_another_tab_ends_in_the_notice(
    browser: Any, tmp_path: Path
) -> None:
    """A stream outputs only its own parts (a frame stays cheap); the check chained after it brings the tab to the
    notice and the start screen, and nothing of the reply is stored."""
    model = HeldModel()
    url, blocks, bot, worker = serve(tmp_path / "keem.db", model=model)
    try:
        first, second = tab(browser, url, "userA"), tab(browser, url, "userA")
        send(second, "고양이 이야기 들려줄게")
        assert model.held.wait(15)
        forget_on_page(first, "userA")
        model.go.set()
        second.get_by_text(NOTICE).first.wait_for(timeout=15_000)
        second.locator("#start-button").wait_for(state="visible", timeout=15_000)
        assert second.locator("#main").is_hidden() and "고양이 이야기" not in second.content()
        assert bot.store.rows("select * from turns") == []
    finally:
        model.go.set()
        worker.stop()
        blocks.close()
        bot.store.close()
