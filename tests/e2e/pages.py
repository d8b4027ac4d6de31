"""What a person does in the app's page (Playwright), shared by the browser tests and docs/screenshots.py."""

from __future__ import annotations

import json
import re
import time
from typing import Any


def enter(page: Any, url: str, name: str, *, opened: bool = False) -> None:
    """Open the app (unless it is `opened` already) and start chatting as `name`."""
    if not opened:
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


# -- the memory tab's one list: a row per sentence with its actions (chatbot/web/editing.py) ----------------------
SENTENCES = "[id^=sentence-][id$=-text]"  # each row's sentence (Gradio repeats elem_classes inside; ids are one)


def memory_row(page: Any, text: str, timeout: int = 15_000) -> str:
    """The id ("sentence-2") of the memory tab's row whose sentence contains `text`, once it is shown."""
    found = page.locator(SENTENCES).filter(has_text=text).first
    found.wait_for(timeout=timeout)
    return str(found.get_attribute("id")).removesuffix("-text")


def shown_memory(page: Any, version: str, timeout: float = 15.0) -> str:
    """The memory list's text once the header names `version` ("현재 기억 v2") and all its "N문장" rows have drawn
    (the header comes first; a row's Markdown may draw a moment later)."""
    page.locator("#memory").get_by_text(version).wait_for(timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:
        head = page.locator("#memory-head").inner_text()
        count = re.search(r"(\d+)문장", head)
        rows = [t for t in memory_sentences(page) if t]
        if version in head and count and len(rows) == int(count.group(1)):
            return str(page.locator("#memory").inner_text())
        if time.monotonic() > deadline:
            raise AssertionError(f"the memory list did not draw {version}'s rows: {head!r}, {rows}")
        time.sleep(0.1)


def memory_sentences(page: Any) -> list[str]:
    """The list's sentences as the page shows them, numbers included ("1. 사용자는 ...")."""
    return [t.strip() for t in page.locator(SENTENCES).all_inner_texts()]


def edit_sentence(page: Any, old: str, new: str) -> None:
    """고치기 on the row saying `old`: its box opens holding the sentence, `new` is typed and saved."""
    row = memory_row(page, old)
    page.locator(f"#{row}-edit").click()
    box = page.locator(f"#{row}-box textarea")
    box.wait_for(state="visible", timeout=10_000)
    box.fill(new)
    page.locator(f"#{row}-save").click()


def delete_sentence(page: Any, text: str) -> None:
    """지우기 on the row saying `text`: it asks first, then the answer 지우기."""
    row = memory_row(page, text)
    page.locator(f"#{row}-delete").click()
    page.locator(f"#{row}").get_by_text("이 문장을 기억에서 지울까요?").wait_for(timeout=10_000)
    page.locator(f"#{row}-yes").click()


def erase_sentence(page: Any, text: str, sure: bool = True) -> str:
    """완전히 지우기 on the row saying `text`: the warning opens; with `sure` its checkbox is ticked and then the
    confirming button (off until then) clicked. Returns the row's id."""
    row = memory_row(page, text)
    page.locator(f"#{row}-erase-button").click()
    page.locator(f"#{row}").get_by_text("되돌릴 수 없습니다").first.wait_for(timeout=10_000)
    if sure:
        page.locator(f"#{row}-sure input").check()
        page.locator(f"#{row}-erase").click()
    return row


def open_why(page: Any, text: str) -> str:
    """왜? on the row saying `text`: returns the provenance it opens, as shown."""
    row = memory_row(page, text)
    page.locator(f"#{row}-why-button").click()
    why = page.locator(f"#{row}-why")
    why.wait_for(state="visible", timeout=10_000)
    return str(why.inner_text())


def shown_once(page: Any, sentences: list[str]) -> None:
    """Each sentence is on the memory tab's visible text exactly once outside what changed (the changelog of the
    latest version and the history name the sentences they changed), once the list is drawn: its draw is an event
    of its own, which a loaded machine answers after the tab opened (read at once, CI saw the changelog alone)."""
    tab = page.get_by_role("tabpanel").filter(has=page.locator("#memory"))

    def extra() -> tuple[dict[str, int], str]:
        text = tab.inner_text()
        changes = page.locator("#changelog").inner_text() + page.locator("#history").inner_text()
        return {s: text.count(s) - changes.count(s) for s in sentences}, text

    try:
        wait_until(page, lambda: set(extra()[0].values()) == {1}, "each sentence once in the memory list")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {extra()}") from None


def list_draws(page: Any, url: str) -> list[int]:
    """Each time from now on that the page asks the server to draw the memory tab's list (the render that follows
    the list's State): one entry a request, filled as Playwright delivers the page's events."""
    import httpx

    config = httpx.get(url + "config", timeout=30).json()
    states = {c["id"] for c in config["components"] if c["type"] == "state"}
    render = {
        d["id"]
        for d in config["dependencies"]
        if d["targets"] and all(t[0] in states and t[1] == "change" for t in d["targets"])
    }
    draws: list[int] = []

    def seen(request: Any) -> None:
        if "/queue/join" in request.url and request.method == "POST":
            if json.loads(request.post_data or "{}").get("fn_index") in render:
                draws.append(len(draws) + 1)

    page.on("request", seen)
    return draws


def wait_until(page: Any, check: Any, what: str, timeout_s: float = 15) -> Any:
    """Poll `check` while Playwright delivers the page's events (a plain sleep would hold them back)."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        page.wait_for_timeout(100)
    return value


def open_past(page: Any, shows: str, label: str | None = None, timeout_s: float = 20) -> str:
    """Open 지난 대화, pick a conversation (the newest, or the first whose label holds `label`) and return its
    transcript once it shows `shows`. A listing that lands after the pick (the tab's select answered late) clears
    it, so the pick is made again, as a person would; a failure says what the page showed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    open_tab(page, "지난 대화")
    transcript = page.locator("#past-transcript")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page.locator("#past-pick input").click()
        options = page.get_by_role("option")
        (options.filter(has_text=label) if label else options).first.click()
        try:
            transcript.get_by_text(shows).first.wait_for(timeout=4_000)
            return str(transcript.inner_text())
        except PlaywrightTimeout:
            continue
    page.locator("#past-pick input").click()
    labels = page.get_by_role("option").all_inner_texts()
    raise AssertionError(f"no transcript showing {shows!r}: {transcript.inner_text()!r}, options {labels}")
