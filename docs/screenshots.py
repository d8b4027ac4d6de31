"""Write the docs' screenshots (docs/screenshot.png, docs/screenshot-memory.png, docs/screenshot-phone.png,
docs/screenshot-why.png, docs/screenshot-changelog.png): `make screenshots`.

Starts `python app.py` on a fresh database in a temporary folder against a loopback OpenAI-compatible server
(tests/fake_openai.py) that answers in Korean, then drives Debian's chromium (Playwright) through two sessions and a
memory edit at desktop size, and a third session on a phone (390x844). Tests never write these files; run this when
the page changes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import ARGS, CHROMIUM, app_process  # noqa: E402
from tests.e2e.pages import (  # noqa: E402
    edit_sentence,
    enter,
    last_bot_says,
    memory_row,
    memory_sentences,
    open_tab,
    open_why,
)
from tests.fake_openai import FakeOpenAIServer  # noqa: E402
from tests.helpers import answer  # noqa: E402
from tests.provenance_world import SESSION1, SESSION2, SUMMARIES, world  # noqa: E402

PHONE = {"width": 390, "height": 844}
CHAT = "우와, 부산으로 이사했군요! 바다가 보이는 집이라니 정말 멋져요. 새 동네는 어때요?"


def reply(body: dict[str, Any]) -> str:
    messages = body["messages"]
    if "당신은 사용자와" in messages[0]["content"]:
        return CHAT
    said = [*SESSION1, *SESSION2, *(line for lines in SUMMARIES.values() for line in lines)]
    if any(line in messages[-1]["content"] for line in said):  # 지우's sessions and memory (why_shots)
        return world(messages)
    return answer(messages)


def say(page: Any, text: str) -> None:
    page.locator("#message-input textarea").fill(text)
    page.locator("#message-input textarea").press("Enter")
    last_bot_says(page, "어때요?")


def end_session(page: Any) -> None:
    page.locator("#end-button").click()
    page.locator("#progress").get_by_text("완료").wait_for(timeout=60_000)


def main(out: Path = ROOT / "docs") -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(reply) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "local"}
        with app_process(Path(tmp), "openai:korean-demo", env) as (url, _proc), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_context(locale="ko-KR", viewport={"width": 1200, "height": 900}).new_page()
            enter(page, url, "민수")
            say(page, "나 지난주에 부산으로 이사했어. 바다가 보여서 너무 좋아!")
            end_session(page)
            page.locator("#new-session-button").click()
            say(page, "오늘은 바다 산책을 했어")
            page.locator("#hits-accordion").get_by_text("이번 답변에 쓰인 기억").click()
            page.locator("#hits").get_by_text("부산").first.wait_for(timeout=10_000)
            page.screenshot(path=str(out / "screenshot.png"), full_page=True)

            end_session(page)
            open_tab(page, "기억")
            page.locator("#memory").get_by_text("현재 기억 v2").wait_for(timeout=10_000)
            edit_sentence(page, "산책", "사용자는 매일 저녁 바다 산책을 한다.")
            page.locator("#memory").get_by_text("현재 기억 v3").wait_for(timeout=10_000)
            page.evaluate("document.querySelectorAll('.toast-wrap').forEach(t => t.remove())")  # "저장했습니다"
            page.screenshot(path=str(out / "screenshot-memory.png"), full_page=True)

            phone = browser.new_context(locale="ko-KR", viewport=PHONE, is_mobile=True, has_touch=True).new_page()
            enter(phone, url, "민수")  # the same person on a phone: the first screen, as it is (not the full page)
            say(phone, "바다 산책 다녀왔어")
            phone.screenshot(path=str(out / "screenshot-phone.png"))
            why_shots(browser.new_context(locale="ko-KR", viewport={"width": 1200, "height": 900}).new_page(), url, out)
            browser.close()
    print(f"wrote {', '.join(str(out / name) for name in SHOTS)}")


SHOTS = (
    "screenshot.png",
    "screenshot-memory.png",
    "screenshot-phone.png",
    "screenshot-why.png",
    "screenshot-changelog.png",
)


def why_shots(page: Any, url: str, out: Path) -> None:
    """Two sessions of another user, the second of which moves house, quits smoking and starts the piano: its
    changelog (docs/screenshot-changelog.png: a drop the model justified, one the guard restored) and the first
    sentence's row with its 왜? opened (docs/screenshot-why.png)."""
    enter(page, url, "지우")
    for session in (SESSION1, SESSION2):
        if session is SESSION2:
            page.locator("#new-session-button").click()
            page.wait_for_function("() => !document.querySelectorAll('[data-testid=bot]').length")
        for text in session:  # each reply before the next message (every reply here ends the same way)
            replies = page.locator("[data-testid=bot]").count()
            say(page, text)
            page.wait_for_function(
                "n => document.querySelectorAll('[data-testid=bot]').length > n", arg=replies, timeout=30_000
            )
            last_bot_says(page, "어때요?")
        end_session(page)
    open_tab(page, "기억")
    page.locator("#changelog").get_by_text("더 이상 기억하지 않음").first.wait_for(timeout=10_000)
    page.locator("#changelog").screenshot(path=str(out / "screenshot-changelog.png"))
    first = memory_sentences(page)[0].split(". ", 1)[-1]
    open_why(page, first)  # the first sentence's 왜?
    page.locator(f"#{memory_row(page, first)}").first.screenshot(path=str(out / "screenshot-why.png"))


if __name__ == "__main__":
    main()
