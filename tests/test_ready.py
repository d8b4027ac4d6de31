"""After a (re)start the page serves at once while the models load: it must not look ready before it is (in a real
browser: tests/e2e/test_browser.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from chatbot.bot import Chatbot
from chatbot.web.app import Backend, ChatUI
from chatbot.worker import Worker
from tests.test_ui import make_bot


def gated(bot: Chatbot, gate: threading.Event) -> Backend:
    def load() -> tuple[Chatbot, Worker]:
        gate.wait(30)
        return bot, Worker(bot, poll_s=0.05).start()

    return Backend.loading(load)


def test_the_start_button_says_loading_and_takes_no_click_until_the_models_are_ready(tmp_path: Path) -> None:
    gate = threading.Event()
    ui = ChatUI(gated(make_bot(tmp_path / "k.db"), gate))
    banner, timer, start = ui.banner()
    assert "불러오는 중" in banner and start["interactive"] is False and "불러오는 중" in start["value"]
    assert timer.active  # it keeps ticking until the models are ready
    gate.set()
    assert ui.backend.done.wait(5)
    banner, timer, start = ui.banner()
    assert not timer.active and "임베더" in banner and (start["value"], start["interactive"]) == ("대화 시작", True)
    ui.backend.worker.stop()
    failing = ChatUI(Backend.loading(lambda: (_ for _ in ()).throw(RuntimeError("no weights"))))
    failing.backend.done.wait(5)
    assert failing.banner()[2]["interactive"] is False and "불러오지 못했습니다" in failing.banner()[2]["value"]
