"""The page a Korean user meets (issue 24), in chromium at desktop size, against a loopback OpenAI-compatible
server: the server goes down, the reply is a Korean notice in the chat with 다시 보내기, the server comes back and
the retried message is answered (stored once); a slow reply stopped keeps what was shown; ■ 멈추기 and ↻ 다시 생성
show only when they can act (chatbot/web/actions.py); after 대화 끝내기 the status card and the 지난 대화 tab; a
memory sentence edited in place from a prefilled box, each sentence shown once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from models.openai_backend import OpenAIChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.pages import (
    enter,
    last_bot_says,
    memory_row,
    memory_sentences,
    open_past,
    open_tab,
    shown_memory,
    shown_once,
)
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import answer, serve

pytestmark = needs_chromium


def test_a_failed_reply_is_retried_then_the_end_card_past_conversations_and_editing_in_place(
    new_page: Any, tmp_path: Path
) -> None:
    with FakeOpenAIServer(reply=lambda body: answer(body["messages"])) as server:
        model = OpenAIChatModel("fake", base_url=server.url, max_retries=0, timeout_s=10)
        url, app, bot, worker = serve(tmp_path / "keem.db", model=model)  # type: ignore[arg-type]
        try:
            page = new_page(viewport={"width": 1280, "height": 900})
            enter(page, url, "민수")
            box = page.locator("#message-input textarea")
            stop, redo = page.locator("#stop-button"), page.locator("#regenerate-button")
            assert not stop.is_visible() and not redo.is_visible()  # an empty chat: nothing to stop or ask again

            server.down()  # the model server is gone: the reply's place holds a Korean notice
            box.fill("나 지난주에 부산으로 이사했어")
            box.press("Enter")
            chat = page.locator("#chat")
            chat.get_by_text("모델 서버에 연결할 수 없습니다").wait_for(timeout=30_000)  # before the folded details
            assert "답변을 받지 못했습니다" in chat.inner_text()
            assert "기술 정보" in chat.inner_text()
            assert "APIConnectionError" not in chat.inner_text() and "GenerationError" not in chat.inner_text()
            retry = chat.get_by_role("button", name="다시 보내기")
            retry.wait_for(timeout=10_000)
            assert not stop.is_visible() and not redo.is_visible()  # the notice's 다시 보내기 is the action

            server.up()
            retry.click()
            last_bot_says(page, "네, 잘 들었어요", timeout=30_000)
            assert "답변을 받지 못했습니다" not in chat.inner_text()
            session = bot.store.sessions.of_user(bot.store.users.require("민수"))[-1]["id"]
            assert [t["role"] for t in bot.store.turns.of_session(session)] == ["user", "assistant"]
            redo.wait_for(state="visible", timeout=10_000)  # a finished reply may be asked again
            assert not stop.is_visible()

            server.chunk_delay_s = 0.25  # a slow reply, stopped while it streams: what was shown is what is kept
            box.fill("하나부터 열까지 천천히 세어 줘")
            box.press("Enter")
            page.wait_for_function(
                "() => { const b = document.querySelectorAll('[data-testid=bot]');"
                " return b.length && b[b.length-1].innerText.includes('하나부터'); }",  # this reply, streaming
                timeout=15_000,
            )
            assert stop.is_visible() and not redo.is_visible()  # streaming: 멈추기 only
            stop.click()
            page.locator("#pending-note").get_by_text("답변을 멈췄습니다").wait_for(timeout=10_000)
            for _ in range(50):  # the reply ends after its next piece, and is stored then
                stopped = bot.store.turns.of_session(session)[-1]
                if stopped["role"] == "assistant":
                    break
                time.sleep(0.1)
            server.chunk_delay_s = 0.0
            assert stopped["mark"] == "stopped" and "세어 줘" not in stopped["text"]
            last_bot_says(page, stopped["text"])
            redo.wait_for(state="visible", timeout=10_000)  # the stopped reply may be asked again
            stop.wait_for(state="hidden", timeout=10_000)

            page.locator("#end-button").click()  # the card beside the message box, the box and button off
            card = page.locator("#end-card")
            card.get_by_text("대화를 끝냈어요").wait_for(timeout=10_000)
            assert box.is_disabled() and box.get_attribute("placeholder") == "대화가 끝났습니다."
            assert page.locator("#end-button").is_disabled()
            assert card.locator("#new-session-button").is_visible()
            assert not stop.is_visible() and not redo.is_visible()  # an ended conversation: neither
            card.get_by_text("기억을 새로 썼어요").wait_for(timeout=30_000)

            transcript = open_past(page, "멈춘 답변", label="부산")  # the stopped reply, as stored
            assert "나 나 지난주에 부산으로 이사했어" in transcript  # the speaker, then what was said
            page.set_viewport_size({"width": 390, "height": 844})  # on a phone: the picked text stops before the arrow
            gap = page.locator("#past-pick").evaluate(
                "e => { const i = e.querySelector('input'), a = e.querySelector('.icon-wrap');"
                " return a.getBoundingClientRect().left"
                " - (i.getBoundingClientRect().right - parseFloat(getComputedStyle(i).paddingRight)); }"
            )
            assert gap >= 0, gap
            open_tab(page, "대화")  # and the ended conversation's message box shows its placeholder whole
            room = box.evaluate(
                "e => { const c = document.createElement('canvas').getContext('2d'), s = getComputedStyle(e);"
                " c.font = s.font; return e.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight)"
                " - c.measureText(e.placeholder).width; }"
            )
            assert room >= 0, room
            page.set_viewport_size({"width": 1280, "height": 900})

            open_tab(page, "기억")
            page.locator("#memory").get_by_text("현재 기억 v1").wait_for(timeout=10_000)
            # (the row's first line: a date in it is read as of today on a line under it)
            first = page.locator("#sentence-0-text").inner_text().splitlines()[0].split(". ", 1)[-1]
            page.locator("#sentence-0-edit").click()
            edit_box = page.locator("#sentence-0-box textarea")
            edit_box.wait_for(state="visible", timeout=10_000)
            assert edit_box.input_value() == first and "부산" in first  # prefilled with the sentence
            edit_box.fill("사용자는 지난주 부산 해운대로 이사했다.")
            page.set_viewport_size({"width": 1280, "height": 420})  # a short window, the rows at its top
            page.evaluate("document.querySelector('#sentence-0').scrollIntoView({block: 'start'})")
            page.locator("#sentence-0-save").click()
            saved = page.locator(".toast-body").filter(has_text="새 기억 버전을 저장했습니다")
            saved.wait_for(timeout=10_000)  # a desktop's toast keeps clear of the rows' actions
            covered = saved.evaluate(
                "t => { const r = t.getBoundingClientRect();"
                " return [...document.querySelectorAll('.keem-sentence-actions button')].filter(b => {"
                " const q = b.getBoundingClientRect(); return q.width && q.left < r.right && r.left < q.right"
                " && q.top < r.bottom && r.top < q.bottom; }).map(b => b.id); }"
            )
            assert covered == [], covered
            page.set_viewport_size({"width": 1280, "height": 900})
            assert "해운대" in shown_memory(page, "현재 기억 v2")
            page.locator("#sentence-0-text").get_by_text("해운대").wait_for(timeout=10_000)  # the rows follow
            sentences = [line.split(". ", 1)[-1] for line in memory_sentences(page)]
            # what the user typed in relative words is stored as a date, and read as of today under it
            stored, _, read = sentences[0].partition("\n")
            assert stored.endswith("부산 해운대로 이사했다.") and "지난주" not in stored and "년" in stored, stored
            assert "(지난주)" in read, read
            shown_once(page, [s.partition("\n")[0] for s in sentences])  # each sentence once, beside what changed
            page.locator("#sentence-0-delete").click()  # deleting asks first
            page.get_by_text("이 문장을 기억에서 지울까요?").wait_for(timeout=10_000)
            page.locator("#add-text textarea").fill("사용자는 바다 수영을 배우고 싶어 한다.")  # one box under the list
            page.locator("#add-button").click()
            page.locator("#memory").get_by_text("현재 기억 v3").wait_for(timeout=10_000)
            memory_row(page, "바다 수영")  # a numbered row of its own, the last
            assert memory_sentences(page)[-1] == f"{len(sentences) + 1}. 사용자는 바다 수영을 배우고 싶어 한다."
            assert page.locator("#add-text textarea").input_value() == ""
        finally:
            app.close()
            worker.stop()
            bot.store.close()
