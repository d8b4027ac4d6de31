"""After a (re)start the page serves at once while the models load: it must not look ready before it is (in a real
browser: tests/e2e/test_browser.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from chatbot.web.backend import Backend
from chatbot.web.chat import ChatUI
from tests.helpers import gated, make_bot


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
