"""What a person does in the app's page (Playwright), shared by the browser tests and docs/screenshots.py."""

from __future__ import annotations

from typing import Any


def enter(page: Any, url: str, name: str) -> None:
    """Open the app and start chatting as `name`."""
    page.goto(url)
    page.locator("#name-input textarea, #name-input input").first.fill(name)
    page.locator("#start-button").click()
    page.locator("#message-input textarea").wait_for(state="visible", timeout=15_000)
    page.locator("#greeting").get_by_text(name).wait_for(timeout=15_000)


def open_tab(page: Any, name: str) -> None:
    """Click a tab until it is the selected one (a click during a re-render can be lost)."""
    tab = page.get_by_role("tab", name=name, exact=True)  # "대화" is not "지난 대화"
    for _ in range(20):
        tab.click()
        if tab.get_attribute("aria-selected") == "true":
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"tab {name} would not open")


def last_bot_says(page: Any, text: str, timeout: int = 30_000) -> None:
    """Wait until the last bot bubble contains `text`."""
    page.wait_for_function(
        "t => { const b = document.querySelectorAll('[data-testid=bot]');"
        " return b.length && b[b.length-1].innerText.includes(t); }",
        arg=text,
        timeout=timeout,
    )
