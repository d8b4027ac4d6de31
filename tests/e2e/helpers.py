"""What the browser and app-process tests share: the app served with a gated updater, a reply awaited in
the page, a message sent, a user forgotten from the page, a reply read from a running server."""

from __future__ import annotations

from typing import Any

from chatbot.bot import Chatbot
from chatbot.web.app import build_app
from chatbot.worker import Worker
from tests.helpers import answer, launch


def serve_bot(bot: Chatbot) -> tuple[str, Any, Worker]:
    """The app in this process on a free 127.0.0.1 port, its worker running; the caller closes both."""
    worker = Worker(bot, poll_s=0.05).start()
    app = build_app(bot, worker)
    return launch(app), app, worker


def reply(body: dict) -> str:
    messages = body["messages"]
    if "당신은 사용자와" in messages[0]["content"]:
        return "그랬군요. 이야기해 줘서 고마워요. 조금 더 들려줄래요?"
    return answer(messages)


def server_reply(body: dict) -> str:
    return answer(body["messages"])


NOTICE = "이 사용자의 데이터가 삭제되었습니다"


def send(page: Any, text: str) -> None:
    page.locator("#message-input textarea").fill(text)
    page.locator("#message-input textarea").press("Enter")


def forget_on_page(page: Any, name: str) -> None:
    tab_button = page.get_by_role("tab", name="기억")
    for _ in range(20):
        tab_button.click()
        if tab_button.get_attribute("aria-selected") == "true":
            break
        page.wait_for_timeout(250)
    page.get_by_text("나를 잊기 (모든 데이터 삭제)").click()
    page.locator("#forget-confirm textarea, #forget-confirm input").first.fill(name)
    page.locator("#forget-button").click()
    page.locator("#start-button").wait_for(state="visible", timeout=15_000)
