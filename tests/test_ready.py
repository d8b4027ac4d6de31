"""After a (re)start the page serves at once while the models load: it must not look ready before it is."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chatbot.bot import Chatbot
from chatbot.web.app import build_app, launch_options
from chatbot.web.backend import Backend
from chatbot.web.chat import ChatUI
from chatbot.worker import Worker
from tests.test_browser import browser, enter, needs_chromium  # noqa: F401  (browser is a fixture)
from tests.test_ui import free_port, make_bot


def gated(bot: Chatbot, gate: threading.Event) -> Backend:
    def load() -> tuple[Chatbot, Worker]:
        gate.wait(30)
        return bot, Worker(bot, poll_s=0.05).start()

    return Backend.loading(load)


def test_the_start_button_says_loading_and_takes_no_click_until_the_models_are_ready(tmp_path: Path) -> None:
    gate = threading.Event()
    ui = ChatUI(gated(make_bot(tmp_path / "k.db"), gate))
    shown = ui.entry.banner()
    assert "불러오는 중" in shown.banner and not shown.start["interactive"] and "불러오는 중" in shown.start["value"]
    assert shown.banner_timer.active  # it keeps ticking until the models are ready
    gate.set()
    assert ui.backend.done.wait(5)
    shown = ui.entry.banner()
    assert not shown.banner_timer.active and "임베더" in shown.banner
    assert (shown.start["value"], shown.start["interactive"]) == ("대화 시작", True)
    ui.backend.worker.stop()
    failing = ChatUI(Backend.loading(lambda: (_ for _ in ()).throw(RuntimeError("no weights"))))
    failing.backend.done.wait(5)
    start = failing.entry.banner().start
    assert start["interactive"] is False and "불러오지 못했습니다" in start["value"]


@pytest.mark.slow
@needs_chromium
def test_after_a_restart_the_page_enables_start_only_when_chat_answers(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    gate = threading.Event()
    backend = gated(make_bot(tmp_path / "k.db"), gate)
    app = build_app(backend)
    port = free_port()
    app.queue().launch(
        server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options()
    )
    try:
        page = browser.new_context(locale="ko-KR").new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        start = page.locator("#start-button")
        start.get_by_text("모델을 불러오는 중").wait_for(timeout=15_000)
        assert start.is_disabled()
        gate.set()  # the models are ready: the banner timer's next tick enables the button
        start.get_by_text("대화 시작").wait_for(timeout=15_000)
        assert start.is_enabled()
        enter(page, f"http://127.0.0.1:{port}/", "민수")  # and it answers: chat opens
    finally:
        app.close()
        gate.set()
        if backend.worker is not None:
            backend.worker.stop()
