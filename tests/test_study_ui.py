"""A user trial in the app's handlers (chatbot/trials/web.py): consent before anything is stored, the gap between
sessions, the questionnaire after each session (completable later, once), and the organiser's view."""

from __future__ import annotations

import dataclasses
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest

from chatbot.study import load_study, study_from_dict
from chatbot.study_records import records
from chatbot.trials.web import Limiter, Participant, StudyUI, Unlocked, admin_password, trial_page
from chatbot.web.app import build_app
from chatbot.web.chat import ChatUI
from chatbot.web.messages import korean_error
from chatbot.web.state import UserState
from chatbot.worker import Worker
from models.errors import InputError
from tests.helpers import PLAN, chat_state, enter, make_bot, refused, say

GOOD = (4, 5, 3, 4, "재미있었어요")  # the default questionnaire: four ratings and a comment


def make(tmp_path: Path, **plan: Any) -> tuple[StudyUI, ChatUI, Any, Worker]:
    bot = make_bot(tmp_path / "keem.db", strategy="balanced")
    worker = Worker(bot, poll_s=0.05)
    study = study_from_dict({**PLAN, **plan})
    app = build_app(bot, worker, study=study, trial=trial_page(study, "organiser-pw"))
    return app.keem_study.ui, app.keem_ui, bot, worker  # the handlers, as the page wires them


def one_session(sui: StudyUI, ui: ChatUI, name: str, text: str) -> tuple[Participant, UserState]:
    """A participant who agreed, said `text` in their first session and ended it."""
    person = sui.agree(enter(sui, name)[0], True).person
    state = chat_state(sui, person)
    assert state is not None
    say(ui, text, state)
    ui.chat.end_session(state)
    return person, state


def test_nothing_is_stored_before_consent_and_declining_stores_nothing(tmp_path: Path) -> None:
    sui, _, bot, worker = make(tmp_path)
    person, out = enter(sui, "P001")
    assert person is not None and person.user_id is None and out.consent["visible"] is True  # the consent box
    # its checkbox clear, agree waiting for it, and no start meanwhile
    assert out.agreed is False and out.agree["interactive"] is False and out.start["interactive"] is False
    assert sui.tick(True).agree["interactive"] is True and sui.tick(False).agree["interactive"] is False
    assert chat_state(sui, person) is None  # no chat before agreeing
    assert bot.store.users.all() == [] and bot.store.sessions.of_user(1) == []
    declined = sui.decline(person)
    assert (
        declined.person is None and "아무것도 저장하지 않았습니다" in declined.gate_note and bot.store.users.all() == []
    )

    assert declined.start["interactive"] is True
    person, _ = enter(sui, "P001")
    with refused("동의합니다"):  # a click that skipped the checkbox (a forged event)
        sui.agree(person, False)
    assert bot.store.users.all() == []
    agreed = sui.agree(person, True)
    assert agreed.person.admitted and agreed.consent["visible"] is False and agreed.start["interactive"] is True
    consent = records(bot.store).consent(agreed.person.user_id, "pilot-ui")
    assert consent is not None
    assert consent["study_id"] == "pilot-ui" and consent["text_hash"] == sui.study.consent_hash
    state = chat_state(sui, agreed.person)
    assert state is not None and state.session.strategy in PLAN["strategies"]
    again, out = enter(sui, "P001")  # a later visit: no consent box
    assert again.admitted and out.consent["visible"] is False
    worker.stop()


def test_after_a_session_the_questionnaire_opens_and_is_stored_once_with_the_strategy_hidden(tmp_path: Path) -> None:
    sui, ui, bot, worker = make(tmp_path)
    person, state = one_session(sui, ui, "P002", "오늘 면접을 봤어. 떨렸어")
    shown = sui.after_end(state, person)
    person, title = shown.person, shown.survey_title
    assert shown.survey["visible"] is True and "1번째 대화" in title and len(shown.answers) == 5
    assert person.survey == state.session.session_id
    for word in PLAN["strategies"]:
        assert word not in title

    with refused("문항에 답해 주세요"):  # a rating missing: nothing is written
        sui.submit(person, 4, None, 3, 4, "")
    with refused("1에서 5 사이"):
        sui.submit(person, 4, 9, 3, 4, "")
    assert records(bot.store).answers() == []
    submitted = sui.submit(person, *GOOD)
    person = submitted.person
    assert submitted.survey["visible"] is False and person.survey is None
    rows = records(bot.store).answers(study_id="pilot-ui")
    assert [r["value"] for r in rows] == list(GOOD)
    person.survey = state.session.session_id  # a second tab submits the same questionnaire again
    with pytest.raises(InputError, match="answered already") as twice:
        sui.submit(person, *GOOD)
    assert korean_error(twice.value).startswith("이미 응답한 설문입니다")  # what the page shows
    assert len(records(bot.store).answers()) == 5
    worker.stop()


def test_a_questionnaire_left_open_is_offered_at_the_next_visit_even_when_too_early_to_chat(tmp_path: Path) -> None:
    sui, ui, bot, worker = make(tmp_path)
    person, state = one_session(sui, ui, "P003", "주말에 등산 갔어")  # and the page was closed before the questionnaire
    person, out = enter(sui, "P003")
    assert not person.admitted and "다음 대화는" in out.gate_note and "이후에 할 수 있습니다" in out.gate_note
    assert chat_state(sui, person) is None  # too early: no session opened
    assert len(bot.store.sessions.of_user(person.user_id)) == 1
    assert out.survey["visible"] is True and person.survey == state.session.session_id  # the questionnaire
    sui.submit(person, *GOOD)
    assert len(records(bot.store).answers()) == 5
    # '새 대화 시작' in the old tab is refused too: calmly, under the message box, no warning toast
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        later = ui.chat.new_session(state)
    assert later.note.startswith("⏳ 다음 대화는") and "(한국 시간) 이후에 할 수 있습니다" in later.note
    assert len(bot.store.sessions.of_user(person.user_id)) == 1
    worker.stop()


def test_the_organiser_view_needs_the_password_and_shows_progress_failures_and_a_scrubbed_export(
    tmp_path: Path,
) -> None:
    sui, ui, bot, worker = make(tmp_path)
    _, state = one_session(sui, ui, "P004", "내 번호는 010-2345-6789 이고 메일은 minji.kim@example.com 이야")
    job_id = state.job_id
    bot.store.queue.claim(job_id)
    bot.store.queue.fail(job_id, "GenerationError: update server down", retry_in_s=None)

    sui.organiser.limiter = Limiter(0)  # here no wait between guesses (tests/test_organiser.py checks the limit)
    with refused("비밀번호가 틀렸습니다"):
        sui.organiser.unlock("P004", None)
    with refused("비밀번호를 먼저"):
        sui.organiser.refresh(None)
    with refused("비밀번호를 먼저"):
        sui.organiser.download(None)
    opened = sui.organiser.unlock("organiser-pw", None)
    granted, view, overview, cleared = opened.granted, opened.admin_view, opened.overview, opened.password
    assert granted == Unlocked(None) and view["visible"] is True and cleared == ""
    assert "P004" in overview and "update server down" in overview and "0/1" in overview
    assert "`" not in overview.splitlines()[0]  # the id is escaped Markdown: in a code span it showed "pilot\-ui"
    archive = Path(sui.organiser.download(granted).archive)
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        text = "".join(z.read(n).decode("utf-8") for n in names)
    assert any(n.endswith("questionnaire.csv") for n in names)
    assert "010-2345-6789" not in text and "minji.kim@example.com" not in text
    assert "[전화번호]" in text and "[이메일]" in text
    worker.stop()


def test_without_the_password_there_is_no_organiser_view(tmp_path: Path) -> None:
    assert admin_password({}) is None and admin_password({"KEEM_ADMIN_PASSWORD": "  "}) is None
    assert admin_password({"KEEM_ADMIN_PASSWORD": "s3cret"}) == "s3cret"
    sui, _, _, worker = make(tmp_path)
    closed = StudyUI(sui.entry, sui.study, None)
    with pytest.raises(InputError, match="KEEM_ADMIN_PASSWORD"):
        closed.organiser.unlock("", None)
    with pytest.raises(InputError):
        closed.organiser.refresh(Unlocked(None))  # a tab cannot forge the grant either: no password, no view
    worker.stop()


def test_a_study_file_with_a_mistake_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "study.toml"
    path.write_text('id = "x"\ntitle = "t"\nsessions = 0\nconsent = "c"\n', encoding="utf-8")
    with pytest.raises(InputError, match="field 'sessions'"):
        load_study(path)


def test_trial_screens_say_one_thing_the_card_offers_what_the_plan_allows_and_times_agree(tmp_path: Path) -> None:
    """Issue 34 item 6: after 대화 끝내기 the card's main button is not 새 대화 시작 while the gap applies (it says
    when); the organiser's table shows the minute the participant was told; the organiser's section shows only on
    the organiser's address."""
    from types import SimpleNamespace

    sui, ui, _, worker = make(tmp_path)
    person, state = one_session(sui, ui, "P005", "오늘 면접을 봤어")
    again = sui.after_end(state, person).again
    assert again["interactive"] is False and again["value"].startswith("다음 대화는") and "이후에" in again["value"]
    told = again["value"].removeprefix("다음 대화는 ").split(" (")[0]
    person, out = enter(sui, "P005")
    assert told in out.gate_note  # the start screen's note and the card say the same minute
    sui.organiser.limiter = Limiter(0)
    overview = sui.organiser.unlock("organiser-pw", None).overview
    row = next(line for line in overview.splitlines() if "P005" in line)
    assert told in row, (told, row)  # rounded up as the participant's, not a minute earlier
    assert sui.organiser.section(SimpleNamespace(query_params={})).organiser["visible"] is False
    assert sui.organiser.section(SimpleNamespace(query_params={"organiser": ""})).organiser["visible"] is True

    done, state2 = one_session(sui, ui, "P006", "안녕")  # a plan of one session: done after it
    sui.study = dataclasses.replace(sui.study, sessions=1)
    assert sui.after_end(state2, done).again["value"] == "연구의 대화를 모두 마쳤습니다"
    worker.stop()


def test_a_login_told_to_come_back_later_is_not_also_told_to_press_start(tmp_path: Path) -> None:
    from types import SimpleNamespace

    sui, ui, _, worker = make(tmp_path)
    one_session(sui, ui, "P007", "주말에 등산 갔어")
    out = sui.enter("P007", request=SimpleNamespace(username="P007"))  # type: ignore[arg-type]
    assert "이후에" in out.gate_note and out.who == "**P007** 님으로 로그인했습니다."
    worker.stop()
