"""In chromium: a sentence deleted in the memory tab while the session's update runs stays deleted, in the memory
the page shows and in the memory the next reply uses (memory/store/rebase.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel
from tests.cas_world import CAT, NEWS, Gate, _v1, updater_answer
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import serve_bot
from tests.e2e.pages import delete_sentence, open_tab, shown_memory

pytestmark = needs_chromium


def reply_done(page: Any) -> None:
    """Wait until the page shows a finished reply (the scripted chat answers '네, 알겠어요.')."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=bot]')].some(b => b.innerText.includes('알겠어요'))",
        timeout=30_000,
    )


def test_a_sentence_deleted_while_the_update_runs_stays_deleted_in_the_page_and_in_replies(
    new_page: Any, tmp_path: Path
) -> None:
    gate = Gate()
    bot = Chatbot(
        Settings(db=str(tmp_path / "keem.db")),
        chat_model=ScriptedChatModel(responder=updater_answer(gate)),
        embedder=NgramEmbedder(),
    )
    _v1(bot.engine, bot.store.users.get_or_create("민수"))
    url, app, worker = serve_bot(bot)
    try:
        page = new_page(viewport={"width": 1200, "height": 900})
        page.goto(url)
        page.locator("#name-input textarea, #name-input input").first.fill("민수")
        page.locator("#start-button").click()
        page.locator("#message-input textarea").wait_for(state="visible", timeout=15_000)
        page.locator("#message-input textarea").fill("다음 달에 제주도 여행 가!")
        page.locator("#message-input textarea").press("Enter")
        reply_done(page)
        page.locator("#end-button").click()
        gate.entered.wait(timeout=30)  # the update read version 1 and waits inside its first model call

        open_tab(page, "기억")
        page.locator("#memory").get_by_text("현재 기억 v1").wait_for(timeout=10_000)
        delete_sentence(page, "고양이")
        assert "고양이" not in shown_memory(page, "현재 기억 v2")

        gate.release.set()  # the update, computed from version 1 (the cat in it), commits now
        memory = shown_memory(page, "현재 기억 v3", timeout=30)
        assert "제주도" in memory and "고양이" not in memory
        assert "다시 맞췄습니다" in page.locator("#changelog").inner_text()
        latest = bot.engine.current(bot.store.users.require("민수"))
        assert NEWS in latest.texts and CAT not in latest.texts

        open_tab(page, "대화")
        page.locator("#new-session-button").click()
        page.locator("#message-input textarea").fill("우리 고양이 나비 기억나?")
        page.locator("#message-input textarea").press("Enter")
        page.locator("#hits-accordion").get_by_text("이번 답변에 쓰인 기억").click()
        page.locator("#hits").get_by_text("제주도").first.wait_for(timeout=30_000)  # the memory this reply used
        assert "고양이" not in page.locator("#hits").inner_text()
    finally:
        gate.release.set()
        app.close()
        worker.stop()
        bot.store.close()
