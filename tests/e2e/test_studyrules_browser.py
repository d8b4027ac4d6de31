"""Issue 18 in a real browser: one participant's three tabs press 대화 시작 before any says a thing, then each says
one thing. One session counts; the other two tabs are told in Korean that a conversation is going on in another
tab, their typed text stays in the box, and nothing of theirs is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chatbot.study import study_from_dict, trial_sessions
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import reply
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import serve

pytestmark = needs_chromium
PLAN = {
    "id": "tabs-browser",
    "title": "기억하는 챗봇 사용자 연구",
    "strategies": ["keem", "accumulate"],
    "sessions": 2,
    "min_gap_hours": 20,
    "consent": "연구 참여 동의서: 대화 내용은 연구에만 쓰입니다.",
}


def test_three_tabs_of_one_participant_count_one_session(browser: Any, tmp_path: Path) -> None:
    from models.openai_backend import OpenAIChatModel

    with FakeOpenAIServer(reply, latency_s=1.0) as server:
        model = OpenAIChatModel("fake-loopback", base_url=server.url, api_key="")
        url, app, bot, worker = serve(
            tmp_path / "keem.db",
            auth=[("P001", "pw-P001")],
            model=model,  # type: ignore[arg-type]
            study=study_from_dict(PLAN),
            admin_password="organiser-pw",
            strategy="balanced",
        )
        context = browser.new_context(locale="ko-KR", viewport={"width": 1200, "height": 1000})
        try:
            assert context.request.post(f"{url}login", form={"username": "P001", "password": "pw-P001"}).status == 200
            tabs = [context.new_page() for _ in range(3)]
            for n, page in enumerate(tabs):  # every tab presses 대화 시작 before anyone says a thing
                page.goto(url)
                page.locator("#start-button").wait_for(timeout=15_000)
                page.wait_for_function("() => !document.querySelector('#start-button').disabled", timeout=15_000)
                page.locator("#start-button").click()
                if n == 0:
                    page.locator("#consent-check input").check()
                    page.locator("#consent-agree").click()
                page.locator("#message-input textarea").wait_for(state="visible", timeout=15_000)
            for n, page in enumerate(tabs):  # then each says one thing, one right after the other
                box = page.locator("#message-input textarea")
                box.fill(f"{n}번 창: 오늘 면접을 봤어")
                box.press("Enter")
                if n == 0:  # the first to speak is the one that counts: wait until it is stored, so it is tab 0
                    page.get_by_test_id("user").first.wait_for(timeout=10_000)
            tabs[0].wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=bot]')].some(b => b.innerText.includes('고마워요'))",
                timeout=20_000,
            )
            for n, page in enumerate(tabs[1:], 1):
                page.get_by_text("다른 창에서 하고 있는 대화가 있습니다").first.wait_for(timeout=10_000)
                assert page.locator("#message-input textarea").input_value() == f"{n}번 창: 오늘 면접을 봤어"
            uid = bot.store.users.require("P001")
            assert len(trial_sessions(bot.store, uid)) == 1
            texts = [t["text"] for s in bot.store.sessions.of_user(uid) for t in bot.store.turns.of_session(s["id"])]
            assert [t for t in texts if "번 창" in t] == ["0번 창: 오늘 면접을 봤어"]

            tabs[0].locator("#end-button").click()  # ended: the other tabs are now too early, with the date
            tabs[0].locator("#survey").wait_for(state="visible", timeout=10_000)
            tabs[1].locator("#message-input textarea").press("Enter")
            tabs[1].get_by_text("(한국 시간) 이후에 할 수 있습니다").first.wait_for(timeout=10_000)
            assert len(trial_sessions(bot.store, uid)) == 1
        finally:
            context.close()
            app.close()
            worker.stop()
