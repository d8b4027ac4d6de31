"""'완전히 지우기' in a real browser (system chromium, launched as tests/test_browser.py does): the sentence's row asks
for its confirmation, then the sentence leaves the page and the database file, and the turn that said it reads
[삭제됨]."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.korean import kiwi
from memory.store import MARKER, Sentence
from tests.e2e.conftest import needs_chromium
from tests.e2e.pages import enter, erase_sentence, memory_row, open_tab, shown_memory, shown_once
from tests.erasure_world import leftovers
from tests.helpers import serve

pytestmark = needs_chromium
PHONE = {"width": 390, "height": 844}
PLACE = "사용자는 망원동 빵집 단골이다"
OTHER = "사용자는 주말마다 배드민턴을 친다"


def test_erase_button_confirms_then_the_sentence_and_its_turn_are_gone(new_page: Any, tmp_path: Path) -> None:
    kiwi()  # the Korean analyser the erasure uses loads once, here, not inside the click's wait
    url, app, bot, worker = serve(tmp_path / "data" / "keem.db")
    uid = bot.store.users.get_or_create("민수")
    bot.engine.commit(
        uid, [Sentence(PLACE), Sentence(OTHER)], base=None, strategy="import", status="ok", author="import"
    )
    try:
        page = new_page()
        enter(page, url, "민수")
        page.locator("#message-input textarea").fill("나 망원동 빵집 단골이야")
        page.locator("#message-input textarea").press("Enter")
        page.wait_for_function("() => document.querySelectorAll('[data-testid=bot]').length > 0", timeout=15_000)
        page.wait_for_timeout(1_000)  # the reply is stored
        open_tab(page, "기억")
        shown_once(page, [PLACE, OTHER])
        page.set_viewport_size(PHONE)  # on a phone: row buttons a finger can hit, the destructive ones apart
        row = memory_row(page, "망원동")
        actions = ("edit", "delete", "why-button", "erase-button")
        boxes = {a: page.locator(f"#{row}-{a}").bounding_box() for a in actions}
        assert all(b is not None and b["height"] >= 40 for b in boxes.values()), boxes
        delete, erase = boxes["delete"], boxes["erase-button"]
        assert delete and erase and erase["x"] - (delete["x"] + delete["width"]) >= 40, boxes  # 왜? between them
        row = erase_sentence(page, "망원동", sure=False)  # not confirmed yet: the button is off, nothing changes
        assert page.locator(f"#{row}-erase").is_disabled()
        assert "망원동" in shown_memory(page, "2문장")
        page.locator(f"#{row}-sure input").check()
        page.wait_for_function(f"() => !document.querySelector('#{row}-erase').disabled", timeout=10_000)
        page.locator(f"#{row}-erase").click()
        page.locator("#changelog").get_by_text("삭제됨").first.wait_for(timeout=30_000)
        left = shown_memory(page, "1문장")
        assert "망원동" not in left and "배드민턴" in left
        shown_once(page, [OTHER])
    finally:
        worker.stop()  # first: closing the app closes the tab, which ends its conversation (its update not run here)
        app.close()
    assert bot.store.versions.latest(uid).texts == [OTHER]
    assert [t["text"] for t in bot.store.rows("select text from turns where role = 'user'")] == [MARKER]
    assert leftovers(tmp_path / "data", "망원동", PLACE) == []
