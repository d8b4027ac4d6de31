"""The page a Korean user meets (issue 24): on a phone (390x844) a trial participant logs in on a Korean login page,
agrees to the consent (start waits for the checkbox), chats with 보내기 on the message box's row and 대화 끝내기 on
the first screen, sees Korean times on the memory tab and in the organiser's export, and 나가기 signs the browser out.
At desktop size, a visitor sees the model behind its ⓘ without the server's address; on a phone, ending a conversation
shows its progress and 새 대화 시작 on the first screen."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from chatbot.localtime import KOREA, local_time
from chatbot.study import study_from_dict
from chatbot.web.messages import LABELS
from models.demo import RUNS_TO_BUDGET
from models.fake import ScriptedChatModel
from models.openai_backend import OpenAIChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.pages import enter, open_tab
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import answer, serve

pytestmark = needs_chromium
PHONE = {"width": 390, "height": 844}
PLAN = {
    "id": "phone-trial",
    "title": "기억하는 챗봇 사용자 연구",
    "strategies": ["keem"],
    "sessions": 2,
    "min_gap_hours": 20,
    "consent": "연구 참여 동의서\n\n대화 내용은 연구에만 쓰입니다.\n\n언제든 그만둘 수 있습니다.",
}


def reply(body: dict) -> str:
    messages = body["messages"]
    return "그랬군요. 부산 생활은 어때요?" if "당신은 사용자와" in messages[0]["content"] else answer(messages)


def in_view(page: Any, selector: str) -> dict[str, float]:
    """The element's box, asserted to lie within the first screen (no scrolling)."""
    box = page.locator(selector).bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], (selector, box)
    return box


def test_a_participant_on_a_phone_logs_in_in_korean_chats_sees_korean_times_and_signs_out(
    new_page: Any, tmp_path: Path
) -> None:
    study = study_from_dict(PLAN)
    with FakeOpenAIServer(reply) as server:
        model = OpenAIChatModel("fake-loopback", base_url=server.url, api_key="")
        url, app, bot, worker = serve(
            tmp_path / "k.db", auth=[("P001", "pw-1")], model=model, study=study, admin_password="org-pw"
        )  # type: ignore[arg-type]
        try:
            page = new_page(viewport=PHONE)
            page.goto(url)
            page.get_by_text("KEEM 채팅에 오신 것을 환영합니다").wait_for(timeout=15_000)  # Gradio's login, in Korean
            page.get_by_label("사용자 이름").fill("P001")
            page.get_by_label("비밀번호").fill("wrong")  # a mistyped password: told in plain Korean
            page.get_by_role("button", name="로그인").click()
            creds = page.locator(".creds")
            creds.wait_for(timeout=10_000)
            drawn = creds.evaluate("e => [getComputedStyle(e, '::before').content, getComputedStyle(e).fontSize]")
            assert drawn == ['"아이디나 비밀번호가 맞지 않습니다. 다시 입력해 주세요."', "0px"], drawn
            page.get_by_label("사용자 이름").fill("P001")
            page.get_by_label("비밀번호").fill("pw-1")
            page.get_by_role("button", name="로그인").click()
            page.locator("#login-who").get_by_text("P001").wait_for(timeout=15_000)  # the login says who: no name box
            assert not page.locator("#name-input").is_visible()
            start = page.locator("#start-button")
            page.wait_for_function("() => !document.querySelector('#start-button').disabled", timeout=15_000)
            start.click()
            consent = page.locator("#consent-text")
            consent.get_by_text("언제든 그만둘 수 있습니다").wait_for(timeout=10_000)
            assert consent.locator("p").count() >= 3  # the organiser's paragraphs, kept
            agree = page.locator("#consent-agree")
            assert start.is_disabled() and agree.is_disabled()  # nothing starts before the checkbox
            page.locator("#consent-check input").check()
            page.wait_for_function("() => !document.querySelector('#consent-agree').disabled", timeout=5_000)
            agree.click()

            box = page.locator("#message-input textarea")
            box.wait_for(state="visible", timeout=15_000)
            field, send = in_view(page, "#message-input"), in_view(page, "#send-button")
            assert send["x"] > field["x"] and abs(send["y"] - field["y"]) < field["height"]  # one row
            in_view(page, "#end-button")
            box.fill("나 지난주에 부산으로 이사했어")
            box.press("Enter")
            page.get_by_text("부산 생활은 어때요?").wait_for(timeout=20_000)
            page.locator("#end-button").click()
            page.locator("#progress").get_by_text("완료").wait_for(timeout=30_000)
            page.locator("#survey").get_by_text("번째 대화에 대한 설문").wait_for(timeout=10_000)

            [version] = bot.store.versions.of_user(bot.store.users.find("P001"))
            korean = local_time(KOREA).stamp(version.created_at)  # e.g. 2026-12-02 03:45 KST, stored as UTC
            open_tab(page, "기억")
            page.locator("#memory").get_by_text(korean).wait_for(timeout=10_000)
            changes = page.locator("#changelog").inner_text()  # the only version: what changed, and why
            assert korean in changes and LABELS["updater"] in changes and "keem" not in changes
            assert "keem" not in page.locator("#history").inner_text() + page.locator("#memory").inner_text()

            org = page.context.new_page()  # the organiser's address, beside (participants never see the section)
            org.goto(f"{url}?organiser")
            org.get_by_text("연구자 화면").click()  # the organiser's export: ISO times with Korea's offset
            org.locator("#admin-password input").fill("org-pw")
            org.locator("#admin-open").click()
            org.locator("#admin-export").click()
            link = org.locator("#admin-file a").first
            link.wait_for(timeout=30_000)
            archive = org.context.request.get(link.get_attribute("href"))
            with zipfile.ZipFile(io.BytesIO(archive.body())) as z:
                name = next(n for n in z.namelist() if n.endswith("sessions.jsonl"))
                session = json.loads(z.read(name).decode("utf-8").splitlines()[0])
            assert session["started_at"].endswith("+09:00") and session["turns"][0]["at"].endswith("+09:00")
            org.close()
            assert not page.get_by_text("연구자 화면").is_visible()

            open_tab(page, "대화")
            page.locator("#logout-button").click()  # 나가기 signs this browser out: the login page again
            page.get_by_text("KEEM 채팅에 오신 것을 환영합니다").wait_for(timeout=15_000)
            page.goto(url)
            page.get_by_text("KEEM 채팅에 오신 것을 환영합니다").wait_for(timeout=15_000)
            assert not page.locator("#start-button").is_visible()
        finally:
            app.close()
            worker.stop()


def test_the_model_is_behind_its_info_without_the_server_address_and_a_phone_sees_the_update_progress(
    new_page: Any, tmp_path: Path
) -> None:
    with FakeOpenAIServer(reply) as server:
        model = OpenAIChatModel("fake-loopback", base_url=server.url, api_key="")
        url, app, _, worker = serve(tmp_path / "k.db", model=model)  # type: ignore[arg-type]
        try:
            page = new_page(viewport={"width": 1200, "height": 900})
            enter(page, url, "민수")
            banner = page.locator("#model-banner")
            assert not banner.is_visible()  # behind the ⓘ
            page.locator("#model-info").get_by_text("ⓘ 모델 정보").click()
            banner.get_by_text("fake-loopback").wait_for(timeout=5_000)
            assert server.url not in banner.inner_text() and "http" not in banner.inner_text()
            field, send = page.locator("#message-input").bounding_box(), page.locator("#send-button").bounding_box()
            assert field and send and abs(send["y"] - field["y"]) < field["height"]
            page.set_viewport_size(PHONE)  # the same tab on a phone: ending and its progress on the first screen
            page.evaluate("window.scrollTo(0, 0)")
            box = page.locator("#message-input textarea")
            box.fill("오늘은 바다 산책을 했어")
            box.press("Enter")
            page.get_by_text("부산 생활은 어때요?").wait_for(timeout=20_000)
            in_view(page, "#end-button")
            page.locator("#end-button").click()
            # the status card (chatbot/web/ending.py) is the update's progress: its stages, then the result
            page.locator("#end-steps").get_by_text("기억을 새로 썼어요").wait_for(timeout=30_000)
            page.evaluate("window.scrollTo(0, 0)")
            in_view(page, "#end-steps")
            in_view(page, "#new-session-button")
        finally:
            app.close()
            worker.stop()


def test_with_the_demo_model_the_page_says_what_it_cannot_do_and_the_memory_tab_says_what_happened(
    new_page: Any, tmp_path: Path
) -> None:
    """Issue 34 items 1-2: a model that answers as the demo does (spec `demo`, never asked by the updater: the page
    sees exactly what SmolLM2 gives it, without loading it)."""
    model = ScriptedChatModel(responder=lambda messages: "I am a small model. How can I help?", spec="demo")
    model.runs_to_budget = RUNS_TO_BUDGET
    url, app, _, worker = serve(tmp_path / "k.db", model=model)
    try:
        page = new_page(viewport={"width": 1200, "height": 900})
        enter(page, url, "민수")
        note = page.locator("#demo-note")
        note.get_by_text("한국어로 대화하지 못합니다").first.wait_for(timeout=10_000)  # before the first message
        text = note.inner_text()
        assert "그래도 되는 것" in text and "기억" in text and "ollama pull exaone3.5:7.8b" in text, text
        assert len(page.get_by_test_id("bot").all()) == 0
        page.locator("#model-info").get_by_text("데모 모델 (한국어를 하지 못합니다)").click()
        banner = page.locator("#model-banner").inner_text()
        assert "데모 모델" in banner and "English" not in banner and "KV" not in banner, banner
        box = page.locator("#message-input textarea")
        box.fill("   ")
        box.press("Enter")  # a toast, titled in Korean (chatbot/web/toasts.py)
        toast = page.locator(".toast-body").filter(has_text="빈 메시지입니다")
        toast.wait_for(timeout=10_000)
        shows = toast.locator(".toast-title").evaluate(  # what is drawn: the Korean title, the English one at size 0
            "el => [getComputedStyle(el, '::before').content, getComputedStyle(el).fontSize]"
        )
        assert shows == ['"확인해 주세요"', "0px"], shows
        box.fill("내일 발표가 있어서 좀 떨려")
        box.press("Enter")
        page.get_by_text("I am a small model").wait_for(timeout=20_000)
        labels = page.evaluate("[...document.querySelectorAll('[aria-label]')].map(e => e.getAttribute('aria-label'))")
        english = [x for x in labels if x.isascii() and any(c.isalpha() for c in x)]
        assert not english and "메시지 복사" in labels and "대화 내용" in labels, labels
        page.locator("#end-button").click()
        steps = page.locator("#end-steps")
        steps.get_by_text("바뀐 것과 그 이유").wait_for(timeout=30_000)  # the pointer names where the reason is
        assert "버전 기록" not in steps.inner_text()
        page.set_viewport_size(PHONE)  # the same tab on a phone: the note fits the screen's width
        open_tab(page, "대화")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        assert note.bounding_box()["width"] <= PHONE["width"]  # type: ignore[index]
        open_tab(page, "기억")
        changes = page.locator("#changelog")
        changes.get_by_text("묻지 않았습니다").wait_for(timeout=15_000)  # the reason: not asked, not "failed"
        assert "요약하지 못해(답이 잘렸거나" not in changes.inner_text()
        page.get_by_text("감정의 흐름", exact=True).click()
        page.locator("#emotions").get_by_text("감정을 기록하지 않습니다").wait_for(timeout=10_000)
        emotions = page.locator("#emotions").inner_text()
        assert "감정을 기록하지 않습니다" in emotions and "말하면 여기에 남습니다" not in emotions, emotions
    finally:
        app.close()
        worker.stop()
