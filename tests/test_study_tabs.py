"""Issue 18: a user trial's rules hold in every tab and process. A participant's session counts with its first
message, and that message is checked against the study (sessions held, another one still open, the gap) in the
transaction that stores it: three tabs pressing 대화 시작, saying one thing and ending count one session, not three."""

from __future__ import annotations

import threading
import warnings
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from chatbot.study import Study, study_from_dict, trial_sessions
from chatbot.trials.web import StudyUI, trial_page
from chatbot.web.app import build_app
from chatbot.web.chat import ChatUI
from chatbot.web.state import UserState
from chatbot.worker import Worker
from tests.helpers import drain, make_bot

PLAN = {
    "id": "tabs",
    "title": "기억하는 챗봇 사용자 연구",
    "strategies": ["keem", "accumulate"],
    "sessions": 2,
    "min_gap_hours": 20,
    "consent": "연구 참여 동의서",
}


class Clock:
    """The study's clock: now, moved on by the test."""

    def __init__(self) -> None:
        self.shift = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.shift


def page(db: Path, study: Study) -> tuple[StudyUI, ChatUI, Worker]:
    """One app process's handlers over the database file (its own Store connection)."""
    bot = make_bot(db, strategy="balanced")
    worker = Worker(bot, poll_s=0.05)
    app = build_app(bot, worker, study=study, trial=trial_page(study, "pw"))
    return app.keem_study.ui, app.keem_ui, worker


def open_tab(sui: StudyUI, name: str) -> UserState | None:
    """Press 대화 시작 (the page chains open_chat after enter): the tab's chat, or None when refused."""
    state = sui.open_chat(sui.enter(name).person).state
    return state if isinstance(state, UserState) else None


def talk_and_end(
    ui: ChatUI, state: UserState, text: str, start: threading.Barrier, notes: list[str] | None = None
) -> None:
    """Say one thing and end, as a tab does (outside a Gradio request gr.Warning is a Python warning); a study's
    refusal is said calmly under the message box, not warned: its note goes to `notes`."""
    start.wait()
    sent = ui.chat.send(text, state)
    if isinstance(sent.note, str) and sent.note.startswith("⏳") and notes is not None:
        notes.append(sent.note)
    drain(ui.chat.respond(state))
    ui.chat.end_session(state)


def at_once(tabs: list[tuple[ChatUI, UserState]], text: str) -> list[str]:
    """Every tab says one thing and ends, in threads started together; the refusals shown (Korean): warnings and
    calm notes."""
    start = threading.Barrier(len(tabs))
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as shown:  # one catcher for all threads (it is process-wide)
        warnings.simplefilter("always")
        threads = [
            threading.Thread(target=talk_and_end, args=(*tab, f"{text} ({i})", start, notes))
            for i, tab in enumerate(tabs)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads)
    return [str(w.message) for w in shown] + notes


def said(ui: ChatUI, state: UserState, text: str) -> list[str]:
    """The warnings a tab saying one thing shows, and its calm notes (a study's refusal)."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        talk_and_end(ui, state, text, threading.Barrier(1), notes)
    return [str(w.message) for w in shown] + notes


def test_three_tabs_of_one_participant_in_two_processes_count_one_session_until_the_gap_passes(tmp_path: Path):
    clock = Clock()
    study = replace(study_from_dict(PLAN), clock=clock)
    db = tmp_path / "keem.db"
    (sui, ui, w1), (sui2, ui2, w2) = page(db, study), page(db, study)  # two processes: two connections to one file
    try:
        person = sui.agree(sui.enter("P001").person, True).person
        uid = person.user_id
        store = ui.bot.store

        def three_tabs() -> list[tuple[ChatUI, UserState]]:
            tabs = [(ui, open_tab(sui, "P001")), (ui, open_tab(sui, "P001")), (ui2, open_tab(sui2, "P001"))]
            assert all(state is not None for _, state in tabs)  # each was admitted: nothing counted yet
            return tabs  # type: ignore[return-value]

        # all three press start before any says a thing; then they talk at once
        shown = at_once(three_tabs(), "오늘 면접을 봤어")
        done = trial_sessions(store, uid)
        assert len(done) == 1  # one counts; the other two were refused, in Korean, and stored nothing
        assert len(shown) == 2, shown  # one warning for each refused tab
        assert all("다른 창에서 하고 있는 대화가 있습니다" in w or "(한국 시간) 이후에" in w for w in shown), shown
        texts = [t["text"] for s in store.sessions.of_user(uid) for t in store.turns.of_session(s["id"])]
        assert sum(t.startswith("오늘 면접을 봤어") for t in texts) == 1

        # before the gap: a new start is refused at the door, with the date in Korean time
        assert open_tab(sui, "P001") is None
        note = sui.enter("P001").gate_note
        when = datetime.fromisoformat(done[0]["last_at"]) + timedelta(hours=20)
        assert f"{(when + timedelta(minutes=1)).astimezone(timezone(timedelta(hours=9))):%Y-%m-%d %H}" in note
        assert "(한국 시간) 이후에 할 수 있습니다" in note

        # a tab left open from before (admitted then) cannot make a second session count either
        clock.shift = timedelta(hours=19)
        early = open_tab(sui, "P001")
        assert early is None
        clock.shift = timedelta(hours=21)
        tabs = three_tabs()
        clock.shift = timedelta(hours=19)  # the tabs were opened after the gap; the clock is the study's
        shown = at_once(tabs, "아직 이르다")
        assert len(shown) == 3 and all("(한국 시간) 이후에" in w for w in shown), shown
        assert len(trial_sessions(store, uid)) == 1

        clock.shift = timedelta(hours=21)  # the gap has passed: again exactly one of three counts
        shown = at_once(three_tabs(), "결과가 나왔어")
        assert len(trial_sessions(store, uid)) == 2 and len(shown) == 2, shown

        clock.shift = timedelta(hours=60)  # every session of the plan held: never a third, whatever the tabs
        assert open_tab(sui, "P001") is None and "모두 마치셨습니다" in sui.enter("P001").gate_note
        admitted_before = [(ui, s) for s in (open_tab(sui2, "P001"),) if s is not None]
        assert admitted_before == []
        assert len(trial_sessions(store, uid)) == 2
    finally:
        w1.stop()
        w2.stop()


def test_a_tab_admitted_before_the_limit_was_reached_is_refused_at_its_first_message(tmp_path: Path):
    """The door (대화 시작) is only a courtesy: the rule holds where the message is stored."""
    clock = Clock()
    study = replace(study_from_dict({**PLAN, "sessions": 1, "min_gap_hours": 0}), clock=clock)
    sui, ui, worker = page(tmp_path / "keem.db", study)
    try:
        sui.agree(sui.enter("P001").person, True)
        first, second = open_tab(sui, "P001"), open_tab(sui, "P001")
        assert first is not None and second is not None
        assert said(ui, first, "하나") == []
        shown = said(ui, second, "둘")
        assert shown and "이 연구의 대화를 모두 마치셨습니다" in shown[0]
        uid = first.user_id
        assert len(trial_sessions(ui.bot.store, uid)) == 1
        assert not ui.bot.store.turns.said_anything(second.session.session_id)
    finally:
        worker.stop()
