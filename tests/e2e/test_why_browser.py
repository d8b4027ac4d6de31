"""In chromium: after "대화 끝내기" the memory tab's changelog lists the drop the model justified and the
one the guard restored, each with its reason; a sentence's 왜? opens its sources: the user's own words; and after a
later version (the user's own edit), one tap on "되살리기 (v2에서 빠짐)" still brings the justified drop back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from memory.jobs import JobRunner
from memory.updaters import make_updater
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import serve_bot
from tests.e2e.pages import (
    edit_sentence,
    enter,
    last_bot_says,
    list_draws,
    open_tab,
    open_why,
    shown_memory,
    wait_until,
)
from tests.provenance_world import PEANUT, PIANO, SESSION1, SESSION2, SMOKE, session, world

pytestmark = needs_chromium


def test_the_changelog_shows_both_drops_with_reasons_and_one_tap_restores_the_justified_one(
    new_page: Any, tmp_path: Path
) -> None:
    model = ScriptedChatModel(responder=world)
    bot = Chatbot(Settings(db=str(tmp_path / "keem.db")), chat_model=model, embedder=NgramEmbedder())
    uid = bot.store.users.get_or_create("민수")
    JobRunner(bot.engine, lambda s: make_updater(s, model, bot.engine.embedder)).run(session(bot.store, uid, SESSION1))
    url, app, worker = serve_bot(bot)
    try:
        page = new_page(viewport={"width": 1200, "height": 1600})
        enter(page, url, "민수")
        box = page.locator("#message-input textarea")
        for n, text in enumerate(SESSION2, 1):
            box.fill(text)
            box.press("Enter")
            page.wait_for_function(
                "n => document.querySelectorAll('[data-testid=bot]').length >= n", arg=n, timeout=30_000
            )
            last_bot_says(page, "알겠어요")
        page.locator("#end-button").click()
        page.locator("#progress").get_by_text("완료").wait_for(timeout=60_000)

        open_tab(page, "기억")
        log = page.locator("#changelog")
        log.get_by_text("더 이상 기억하지 않음").first.wait_for(timeout=15_000)
        text = log.inner_text()
        assert SMOKE in text and "더 이상 사실이 아니라고 모델이 판단했어요" in text and "그리고 금연 시작했어" in text
        assert PEANUT in text and "바꿀 만한 말이 없어 그대로 되살렸어요" in text
        assert "keem" not in text and "accumulate" not in text

        why = open_why(page, PIANO)  # the row's 왜?
        assert "요즘 피아노를 배우기 시작했어" in why and "사용자가 한 말" in why

        # a later version (the user's own edit) does not put the earlier update's drop out of reach
        edit_sentence(page, PIANO, "사용자는 요즘 피아노와 기타를 배운다.")
        shown_memory(page, "현재 기억 v3")
        restore = page.locator("#restore-0")
        restore.get_by_text("v2에서 빠짐").wait_for(timeout=10_000)
        assert SMOKE[:20] in restore.inner_text()
        restore.click()  # one tap: "되살리기 (v2에서 빠짐): 사용자는 담배를 피운다."
        assert SMOKE in shown_memory(page, "현재 기억 v4")
        assert "사용자가 되살린" in page.locator("#changelog").inner_text()
        latest = bot.engine.current(uid)
        assert latest.number == 4 and latest.author == "user" and latest.texts[-1] == SMOKE
    finally:
        app.close()
        worker.stop()
        bot.store.close()


def test_why_names_the_feeling_a_rewritten_sentence_holds_now(new_page: Any, tmp_path: Path) -> None:
    """A sentence recorded as 불안 (its emotion record's first label) and rewritten by the user to say the exam went
    well and they are relieved: its 왜? on a phone names the feeling it holds now, not the record's first one."""
    from memory.store import EmotionRecord, Sentence

    model = ScriptedChatModel(responder=world)
    bot = Chatbot(Settings(db=str(tmp_path / "keem.db")), chat_model=model, embedder=NgramEmbedder())
    uid = bot.store.users.get_or_create("민수")
    anxious = "사용자는 시험 때문에 불안하다."
    record = EmotionRecord(key="exam", emotion="불안", cause="시험", sentence=anxious)
    meta = {"strategy": "import", "status": "ok", "author": "import"}
    bot.engine.commit(uid, [Sentence(anxious), Sentence("사용자는 서울에 산다.")], base=None, records=[record], **meta)
    url, app, worker = serve_bot(bot)
    try:
        page = new_page(viewport={"width": 390, "height": 844})
        draws = list_draws(page, url)
        page.goto(url)
        # the page load draws the list once (of nobody), so that the login draws it once more, not twice: a tap
        # between two draws reached an event the second one had removed, and 왜? opened nothing (seen under load)
        page.wait_for_function("() => document.querySelector('#start-button') !== null")
        wait_until(page, lambda: draws, "the page load's draw of the memory list")
        enter(page, url, "민수", opened=True)
        open_tab(page, "기억")
        assert "감정: 불안" in open_why(page, anxious)
        page.wait_for_timeout(500)
        assert len(draws) == 2, draws  # the page load's and the login's
        relieved = "사용자는 시험을 잘 봐서 안도했다."
        edit_sentence(page, anxious, relieved)
        shown_memory(page, "현재 기억 v2")
        why = open_why(page, relieved)
        assert "감정: 안도했다" in why and "감정: 불안" not in why, why  # (the old sentence is quoted as continued)
    finally:
        app.close()
        worker.stop()
        bot.store.close()


def test_the_memory_tab_shows_a_date_as_stored_and_as_read_today(new_page: Any, tmp_path: Path) -> None:
    """A sentence with a date long past, in the page on a phone: the row holds it as stored, and under it how the
    chat reads it today ("오늘 기준: ...(N년 전)에 입학식이 있었다"); a sentence with no date has no such line."""
    from memory.store import Sentence

    model = ScriptedChatModel(responder=world)
    bot = Chatbot(Settings(db=str(tmp_path / "keem.db")), chat_model=model, embedder=NgramEmbedder())
    uid = bot.store.users.get_or_create("민수")
    entrance = "사용자는 2020년 3월 2일에 입학식이 있다."
    meta = {"strategy": "import", "status": "ok", "author": "import"}
    bot.engine.commit(uid, [Sentence(entrance), Sentence("사용자는 서울에 산다.")], base=None, **meta)
    url, app, worker = serve_bot(bot)
    try:
        page = new_page(viewport={"width": 390, "height": 844})
        enter(page, url, "민수")
        open_tab(page, "기억")
        listed = shown_memory(page, "현재 기억 v1")
        assert entrance in listed and "오늘 기준: 사용자는 2020년 3월 2일(" in listed, listed
        assert "년 전)에 입학식이 있었다." in listed and listed.count("오늘 기준") == 1, listed
    finally:
        app.close()
        worker.stop()
        bot.store.close()
