"""A simulated user trial in a real browser (issue 12): three participants with logins, the three strategies balanced
among them, against a loopback model server; consent, chat, end, questionnaire; a session too early is refused, and
one a study gap later (the study's clock moved on, not waited for) is held; the organiser's view behind its
password; then the PII-scrubbed export and the report."""

from __future__ import annotations

import csv
import dataclasses
import io
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from chatbot.cli.main import main as keem
from chatbot.study import study_from_dict
from chatbot.study_records import records
from models.openai_backend import OpenAIChatModel
from tests.e2e.conftest import needs_chromium
from tests.e2e.helpers import reply
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import serve

pytestmark = needs_chromium
GAP = timedelta(hours=20)  # the study's minimum gap between a participant's sessions
PEOPLE = ["P001", "P002", "P003"]  # one per strategy
PII = {  # what participants typed, and the tag the export must show instead
    "010-2345-6789": "[전화번호]",
    "minji.kim@example.com": "[이메일]",
    "900101-2345678": "[주민등록번호]",
    "서울시 마포구 월드컵로 212": "[주소]",
}
PLAN = {
    "id": "pilot-browser",
    "title": "기억하는 챗봇 사용자 연구",
    "strategies": ["keem", "accumulate", "operations"],
    "sessions": 3,
    "min_gap_hours": GAP.total_seconds() / 3600,
    "consent": "연구 참여 동의서: 대화 내용은 연구에만 쓰이며 언제든 그만둘 수 있습니다.",
}


class Clock:
    """The study's "now": real time, moved forward by the test instead of waiting."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.ahead


def sign_in(new_page: Any, url: str, name: str) -> Any:
    """A fresh browser context logged in as `name` (Gradio's login form), on the app's page."""
    page = new_page(viewport={"width": 1200, "height": 1000})
    response = page.context.request.post(f"{url}login", form={"username": name, "password": f"pw-{name}"})
    assert response.status == 200, response.text()
    page.goto(url)
    page.locator("#start-button").wait_for(timeout=15_000)
    page.wait_for_function("() => !document.querySelector('#start-button').disabled", timeout=15_000)
    return page


def toast(page: Any, text: str) -> None:
    page.get_by_text(text).first.wait_for(timeout=10_000)


def hold_session(page: Any, text: str, ratings: tuple[int, ...], comment: str, first: bool) -> None:
    page.locator("#start-button").click()
    if first:
        page.locator("#consent").get_by_text("연구 참여 동의서").wait_for(timeout=10_000)
        page.locator("#consent-check input").check()
        page.locator("#consent-agree").click()
    box = page.locator("#message-input textarea")
    box.wait_for(state="visible", timeout=15_000)
    box.fill(text)
    box.press("Enter")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=bot]')].some(b => b.innerText.includes('고마워요'))",
        timeout=20_000,
    )
    page.locator("#end-button").click()
    survey = page.locator("#survey")
    survey.get_by_text("번째 대화에 대한 설문").wait_for(timeout=10_000)
    for item, rating in zip(("remembered", "understood", "natural", "again"), ratings):
        page.locator(f"#q-{item}").get_by_text(f"{rating} ", exact=False).first.click()
    page.locator("#q-comment textarea").fill(comment)
    page.locator("#survey-submit").click()
    toast(page, "설문을 저장했습니다")
    survey.wait_for(state="hidden", timeout=10_000)


def test_a_study_from_consent_to_report(new_page: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "keem.db"
    clock = Clock()
    study = dataclasses.replace(study_from_dict(PLAN), clock=clock)
    logins = [(p, f"pw-{p}") for p in PEOPLE]
    pii = iter(PII)  # each kind of personal data once, over the four sessions
    with FakeOpenAIServer(reply) as server:
        model = OpenAIChatModel("fake-loopback", base_url=server.url, api_key="")
        url, app, bot, worker = serve(
            db, auth=logins, model=model, study=study, admin_password="organiser-pw", strategy="balanced"
        )  # type: ignore[arg-type]
        try:
            for i, person in enumerate(PEOPLE):  # everyone's first session
                page = sign_in(new_page, url, person)
                said = f"1번째 대화: 요즘 이사 준비로 바빠. 연락처는 {next(pii)} 야"
                hold_session(page, said, (1 + i, 4, 3, 5), f"{person} 의견 1", first=True)
                if i == 1:  # straight after, the card offers what the plan allows: no 새 대화 시작, but when
                    card = page.locator("#new-session-button")
                    page.wait_for_function(
                        "() => document.querySelector('#new-session-button').innerText.includes('이후에')",
                        timeout=10_000,
                    )
                    assert "다음 대화는" in card.inner_text() and card.is_disabled(), card.inner_text()
                page.context.close()

            page = sign_in(new_page, url, "P003")  # another session, straight after: refused with the next date
            page.locator("#start-button").click()
            note = page.locator("#study-note")
            note.get_by_text("이후에 할 수 있습니다").wait_for(timeout=10_000)
            assert "다음 대화는" in note.inner_text()
            assert not page.locator("#message-input textarea").is_visible()
            page.wait_for_function("() => !document.querySelector('#login-who').innerText.includes('눌러')")
            assert "로그인했습니다" in page.locator("#login-who").inner_text()  # one thing at a time: no 'press start'
            assert not page.get_by_text("연구자 화면").is_visible()  # a participant never sees the organiser's section

            page.goto(f"{url}?organiser")  # even on the organiser's address, the password guards it
            page.get_by_text("연구자 화면").click()
            page.locator("#admin-password input").fill("P003")
            page.locator("#admin-open").click()
            toast(page, "비밀번호가 틀렸습니다")
            assert not page.locator("#organiser-view").is_visible()
            page.context.close()

            clock.ahead = GAP + timedelta(seconds=1)  # a study gap later, P001 comes back for a second session
            page = sign_in(new_page, url, "P001")
            hold_session(
                page, f"2번째 대화: 이사는 끝났어. 연락처는 {next(pii)} 야", (5, 4, 3, 5), "P001 의견 2", False
            )
            page.context.close()

            page = sign_in(new_page, url, "P001")  # the organiser, with the password, from any login
            page.goto(f"{url}?organiser")
            page.get_by_text("연구자 화면").click()
            page.locator("#admin-password input").fill("organiser-pw")
            page.locator("#admin-open").click()
            overview = page.locator("#organiser-overview")
            overview.get_by_text("P003").wait_for(timeout=10_000)
            table = overview.inner_text()
            assert all(person in table for person in PEOPLE) and "2/2" in table and "1/1" in table
            page.locator("#admin-export").click()  # the scrubbed export, as a zip to download
            link = page.locator("#admin-file a").first
            link.wait_for(timeout=30_000)
            archive = page.context.request.get(link.get_attribute("href"))
            assert archive.status == 200 and archive.body()[:2] == b"PK"
            with zipfile.ZipFile(io.BytesIO(archive.body())) as z:
                unzipped = "".join(z.read(n).decode("utf-8") for n in z.namelist())
            assert all(raw not in unzipped and tag in unzipped for raw, tag in PII.items())
        finally:
            app.close()
            worker.stop()

    # every participant was assigned one of the three strategies, balanced; four sessions were answered
    strategies = [bot.store.users.find(person) for person in PEOPLE]
    assigned = [r["strategy"] for r in bot.store.users.all()]
    assert sorted(assigned) == sorted(["keem", "accumulate", "operations"]) and None not in strategies
    assert len(records(bot.store).answers(study_id="pilot-browser")) == 4 * 5

    export = tmp_path / "export"
    monkeypatch.setenv("KEEM_DB", str(db))
    assert keem(["trial", "export", "--out", str(export)]) == 0
    dump = "".join(f.read_text(encoding="utf-8") for f in export.iterdir())
    for raw, tag in PII.items():
        assert raw not in dump and tag in dump, raw
    with open(export / "questionnaire.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 5 and {r["strategy"] for r in rows} == {"keem", "accumulate", "operations"}

    report = tmp_path / "report"
    assert keem(["trial", "report", "--export", str(export), "--out", str(report)]) == 0
    text = (report / "report.md").read_text(encoding="utf-8")
    assert all(s in text for s in ("keem", "accumulate", "operations")) and "Kruskal" in text
    assert list(report.glob("*.png"))
