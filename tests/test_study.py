"""The study plan of a user trial: checked at start, sessions spaced and counted, consent, questionnaires stored
whole and once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from chatbot.localtime import KOREA, local_time
from chatbot.settings import Settings
from chatbot.study import (
    ALL_DONE,
    DEFAULT_QUESTIONS,
    assign_strategy,
    give_consent,
    has_consented,
    load_study,
    next_allowed,
    pending_questionnaires,
    refusal_message,
    session_number,
    study_from_settings,
    submit_answers,
)
from chatbot.study_records import records
from chatbot.web.messages import korean_error
from memory.store import Store
from memory.updaters import STRATEGIES
from models.errors import InputError


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


STUDY = '''id = "pilot-1"
title = "기억하는 챗봇 사용자 연구"
strategies = ["keem", "accumulate"]
sessions = 3
min_gap_hours = 20
consent = """연구 참여 동의서: 대화 내용은 연구에만 쓰입니다."""
'''
FIVE = {"remembered": 4, "understood": "5", "natural": 3, "again": "그렇다"}


def write_study(folder: Path, text: str = STUDY, name: str = "study.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def held(store: Store, user_id: int, text: str = "안녕", end: bool = True) -> int:
    """One session in which the participant said something (through the store's public methods)."""
    session_id = store.sessions.start(user_id, "keem", "fake")
    store.turns.add(session_id, user_id, "user", text)
    store.turns.add(session_id, user_id, "assistant", "응")
    if end:
        store.sessions.end(session_id)
    return session_id


def test_a_study_file_loads_with_the_default_questionnaire(tmp_path):
    study = load_study(write_study(tmp_path))
    assert (study.id, study.strategies, study.sessions, study.min_gap) == (
        "pilot-1",
        ("keem", "accumulate"),
        3,
        timedelta(hours=20),
    )
    assert study.questions == DEFAULT_QUESTIONS
    assert [q.text for q in study.questions if q.kind == "likert"] == [
        "챗봇이 지난 대화를 기억했다",
        "내 감정을 이해했다",
        "대화가 자연스러웠다",
        "다시 대화하고 싶다",
    ]
    assert [q.kind for q in study.questions].count("text") == 1
    assert len(study.consent_hash) == 64
    assert study_from_settings(Settings.load({"KEEM_STUDY": str(tmp_path / "study.toml")})) == study
    assert study_from_settings(Settings.load({})) is None  # without a study: nothing changes


def test_a_study_file_may_name_its_own_questions_and_scales(tmp_path):
    study = load_study(
        write_study(
            tmp_path,
            STUDY
            + """
[[questions]]
id = "remembered"
text = "지난 대화를 기억했다"
scale = [1, 7]

[[questions]]
id = "comment"
kind = "text"
text = "하고 싶은 말"
max_chars = 20
""",
        )
    )
    rating, comment = study.questions
    assert (rating.low, rating.high, rating.labels[-1]) == (1, 7, "7")
    assert (comment.kind, comment.max_chars, comment.required) == ("text", 20, False)


@pytest.mark.parametrize(
    "change, field",
    [
        (('id = "pilot-1"', ""), "'id' is missing"),
        (("sessions = 3", 'sessions = "three"'), "'sessions'"),
        (("sessions = 3", "sessions = 0"), "'sessions'"),
        (("sessions = 3", "sesions = 3"), "unknown field 'sesions'"),
        (('["keem", "accumulate"]', '["keem", "random"]'), "'strategies'"),
        (("min_gap_hours = 20", "min_gap_hours = -1"), "'min_gap_hours'"),
        (('consent = """연구 참여 동의서: 대화 내용은 연구에만 쓰입니다."""', 'consent = "  "'), "'consent'"),
        (("title = ", "title == "), "not valid TOML"),
    ],
)
def test_a_broken_study_file_is_refused_naming_the_field(tmp_path, change, field):
    path = write_study(tmp_path, STUDY.replace(*change))
    with pytest.raises(InputError) as exc:
        load_study(path)
    message = str(exc.value)
    assert field in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize(
    "question, field",
    [
        ('id = "x"\ntext = "질문"\nscale = [5, 1]', "'scale'"),
        ('id = "x"\ntext = "질문"\nkind = "stars"', "'kind'"),
        ('id = "X Y"\ntext = "질문"', "'id'"),
        ('id = "x"', "'text' is missing"),
        ('id = "x"\ntext = "질문"\nkind = "text"\nmax_chars = 0', "'max_chars'"),
        ('id = "x"\ntext = "질문"\nlabels = ["a", "b"]', "'labels'"),
        ('id = "x"\ntext = "질문"\nwording = "a"', "unknown field 'wording'"),
    ],
)
def test_a_broken_question_is_refused_naming_it(tmp_path, question, field):
    path = write_study(tmp_path, STUDY + f"\n[[questions]]\n{question}\n")
    with pytest.raises(InputError, match="questions\\[1\\]") as exc:
        load_study(path)
    assert field in str(exc.value)


def test_a_missing_study_file_names_the_setting(tmp_path):
    with pytest.raises(InputError, match="KEEM_STUDY"):
        load_study(tmp_path / "nope.toml")


def test_an_early_session_is_refused_with_the_next_allowed_time(tmp_path, store):
    study = load_study(write_study(tmp_path))
    uid = store.users.get_or_create("p1")
    assert next_allowed(store, uid, study) is None  # a first session may start at once
    store.sessions.start(uid, "keem", "fake")  # opened, nothing said: does not count
    assert next_allowed(store, uid, study) is None
    first = held(store, uid)
    last_message = datetime.fromisoformat(store.turns.of_session(first)[-1]["created_at"])
    when = next_allowed(store, uid, study)
    assert when == last_message + timedelta(hours=20)
    message = refusal_message(when, local_time(KOREA))
    korean = (when.astimezone(timezone(timedelta(hours=9))) + timedelta(seconds=59)).replace(second=0)
    assert message == f"다음 대화는 {korean:%Y-%m-%d %H:%M} (한국 시간) 이후에 할 수 있습니다."
    assert next_allowed(store, uid, study, now=when - timedelta(minutes=1)) == when
    assert next_allowed(store, uid, study, now=when + timedelta(seconds=1)) is None
    assert session_number(store, uid, first) == 1


def test_a_participant_who_held_every_session_is_refused_for_good(tmp_path, store):
    study = load_study(write_study(tmp_path, STUDY.replace("min_gap_hours = 20", "min_gap_hours = 0")))
    uid = store.users.get_or_create("p1")
    for _ in range(3):
        assert next_allowed(store, uid, study) is None
        held(store, uid)
    assert next_allowed(store, uid, study) is ALL_DONE
    assert "모두 마치셨습니다" in refusal_message(ALL_DONE, local_time(KOREA))


def test_consent_is_recorded_once_per_text_and_a_changed_text_needs_a_new_one(tmp_path, store):
    study = load_study(write_study(tmp_path))
    uid = store.users.get_or_create("p1")
    assert not has_consented(store, uid, study) and records(store).consent(uid, study.id) is None
    first = give_consent(store, uid, study, at=datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc))
    assert give_consent(store, uid, study) == first  # agreeing twice keeps the first
    assert first["created_at"] == "2026-11-02T09:00:00+00:00" and first["text_hash"] == study.consent_hash
    assert has_consented(store, uid, study)
    changed = load_study(write_study(tmp_path, STUDY.replace("연구에만", "연구와 교육에만"), "v2.toml"))
    assert not has_consented(store, uid, changed)


def test_answers_are_checked_whole_stored_once_and_nothing_is_written_half_way(tmp_path, store):
    study = load_study(write_study(tmp_path))
    uid = store.users.get_or_create("p1")
    first, second = held(store, uid), held(store, uid)
    assert [s["id"] for s in pending_questionnaires(store, uid, study)] == [first, second]
    for bad, says in [
        ({**FIVE, "natural": 6}, "대화가 자연스러웠다"),
        ({**FIVE, "natural": True}, "1에서 5"),
        ({k: v for k, v in FIVE.items() if k != "again"}, "다시 대화하고 싶다"),
        ({**FIVE, "comment": "가" * 1001}, "너무 깁니다"),
        ({**FIVE, "extra": 1}, "extra"),
    ]:
        with pytest.raises(InputError) as exc:
            submit_answers(store, first, uid, study, bad)
        assert says in str(exc.value)
        assert records(store).answers(session_id=first) == []  # nothing half-way
    assert submit_answers(store, first, uid, study, {**FIVE, "comment": "  재미있었어요 \x00"}) == 5
    stored = {a["item"]: a["value"] for a in records(store).answers(study.id, uid, first)}
    assert stored == {"remembered": 4, "understood": 5, "natural": 3, "again": 4, "comment": "재미있었어요"}
    assert records(store).answers(session_id=first)[0]["question"] == "챗봇이 지난 대화를 기억했다"
    with pytest.raises(InputError, match="answered already") as twice:
        submit_answers(store, first, uid, study, {**FIVE, "remembered": 1})
    assert twice.value.code == "questionnaire_done"
    assert korean_error(twice.value) == "이미 응답한 설문입니다. 한 대화의 설문은 한 번만 제출할 수 있습니다."
    assert {a["item"]: a["value"] for a in records(store).answers(session_id=first)} == stored
    assert [s["id"] for s in pending_questionnaires(store, uid, study)] == [second]
    assert pending_questionnaires(store, uid, study)[0]["number"] == 2
    other = store.users.get_or_create("p2")
    with pytest.raises(InputError, match="participant"):
        submit_answers(store, second, other, study, FIVE)  # not their session


def test_the_study_assigns_only_its_strategies_and_forget_removes_answers_and_consents(tmp_path, store):
    study = load_study(write_study(tmp_path))
    users = [store.users.get_or_create(f"p{i}") for i in range(4)]
    assert sorted(assign_strategy(store, u, study) for u in users) == ["accumulate", "accumulate", "keem", "keem"]
    give_consent(store, users[0], study)
    submit_answers(store, held(store, users[0]), users[0], study, FIVE)
    store.users.delete(users[0])
    assert records(store).answers() == [] and records(store).consent(users[0], study.id) is None


def test_nothing_a_participant_reads_names_a_strategy(tmp_path, store):
    study = load_study(write_study(tmp_path, STUDY.replace("sessions = 3", "sessions = 1")))
    uid = store.users.get_or_create("p1")
    assign_strategy(store, uid, study)
    session = held(store, uid)
    seoul = local_time(KOREA)
    shown = [
        refusal_message(next_allowed(store, uid, study), seoul),
        refusal_message(datetime.now(timezone.utc), seoul),
    ]
    for answers in ({}, {**FIVE, "natural": 9}, {**FIVE, "comment": "가" * 2000}, FIVE, FIVE):
        try:
            submit_answers(store, session, uid, study, answers)
        except InputError as exc:
            shown.append(str(exc))
    assert len(shown) == 6
    for message in shown:
        assert not any(s in message.lower() for s in STRATEGIES), message


def test_the_documented_example_is_a_valid_study_plan(tmp_path):
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "trials.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", page[page.index("## The study plan") :], re.S).group(1)
    study = load_study(write_study(tmp_path, example))
    assert study.strategies == ("keem", "accumulate") and [q.id for q in study.questions] == ["remembered"]


def test_keem_chat_with_a_bad_study_plan_stops_with_one_line_before_it_opens_anything(tmp_path, capsys):
    from chatbot.cli.main import main

    plan = write_study(tmp_path, STUDY.replace("sessions = 3", "sessions = 0"))
    db = tmp_path / "never.db"
    assert main(["chat", "--study", str(plan), "--db", str(db), "--model", "demo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'sessions'" in err and "\n" not in err and "Traceback" not in err
    assert not db.exists()  # nothing opened, nothing loaded
