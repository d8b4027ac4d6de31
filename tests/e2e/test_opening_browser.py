"""A friend who asks first, in a real browser: after logging in, the bot's follow-up about a due interview streams
into the chat before the user types, and the memory tab's "감정의 흐름" shows the record with the user's words."""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from models.fake import ScriptedChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.pages import enter, last_bot_says, open_tab
from tests.emotion_oracle import EmotionOracle, fixture_users
from tests.helpers import serve

pytestmark = needs_chromium


def test_the_opening_streams_after_login_and_the_timeline_shows_the_record(new_page: Any, tmp_path: Path) -> None:
    model = ScriptedChatModel(responder=EmotionOracle(fixture_users()[0]))
    url, app, bot, worker = serve(tmp_path / "keem.db", model=model)
    try:
        session = bot.start("지수")  # three weeks ago: "next Tuesday" is one or two weeks past
        with bot.store.write():
            day = (date.today() - timedelta(days=21)).isoformat()
            bot.store.db.execute(
                "update sessions set started_at = ? where id = ?", [f"{day}T10:00:00+00:00", session.session_id]
            )
        "".join(session.send("다음 주 화요일에 면접이라 떨려"))
        job = session.end()
        bot.run_update(job)  # or the app's worker took it first: wait for it either way
        deadline = time.monotonic() + 30
        while bot.store.queue.get(job)["status"] != "done" and time.monotonic() < deadline:
            time.sleep(0.05)

        page = new_page(viewport={"width": 1200, "height": 900})
        enter(page, url, "지수")
        last_bot_says(page, "면접", timeout=15_000)  # nobody typed anything
        assert page.get_by_test_id("user").count() == 0
        assert page.get_by_test_id("bot").last.inner_text().strip().endswith("?")

        open_tab(page, "기억")
        page.get_by_text("감정의 흐름").click()
        timeline = page.locator("#emotions")
        timeline.get_by_text("떨림").wait_for(timeout=10_000)
        assert "진행 중" in timeline.inner_text() and "다음 주 화요일에 면접이라 떨려" in timeline.inner_text()
    finally:
        worker.stop()
        app.close()
        bot.store.close()
