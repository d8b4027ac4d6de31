"""A query that names a time finds the memory of that time (memory/when.py): the days a sentence names, the day it
was said (its session's date where the user lives, or a person's edit or import), the query's times resolved
against the user's today, and English dates written out (LoCoMo's questions)."""

from __future__ import annotations

from datetime import date, timedelta
from zoneinfo import ZoneInfo

import pytest

from chatbot.localtime import LocalTime
from memory.engine import MemoryEngine
from memory.store import Sentence, Store
from memory.when import SAID_AFTER, WEIGHT, asked, english, held, meets, said_on
from models.embedders import NgramEmbedder

TODAY = date(2026, 12, 7)  # a Monday
JEJU = "사용자는 2026년 11월 30일에 제주도 여행을 다녀왔다."
BUSAN = "사용자는 2026년 10월에 부산 여행을 다녀왔다."
TRAVEL = "사용자는 여행을 좋아한다."


def test_english_dates_written_out_are_read_and_nothing_else():
    assert english("What did Maria share on 16 June, 2023?") == [(date(2023, 6, 16), date(2023, 6, 16))]
    assert english("What painting did Melanie show on October 13, 2023?") == [(date(2023, 10, 13),) * 2]
    assert english("Which places was Evan visiting in July 2023?") == [(date(2023, 7, 1), date(2023, 7, 31))]
    assert english("How many times has she gone to the beach in 2023?") == [(date(2023, 1, 1), date(2023, 12, 31))]
    assert english("in Feb 2024") == [(date(2024, 2, 1), date(2024, 2, 29))]
    # a bare month is also a verb and has no year; a relative word is not resolved; an impossible day is skipped
    assert english("May I ask what she did in May?") == []
    assert english("What did he do last week?") == []
    assert english("on 31 February, 2023") == [(date(2023, 2, 1), date(2023, 2, 28))]  # its month still counts
    assert english("room 2023 and 16 people") == []


def test_a_query_s_korean_times_resolve_against_the_user_s_today():
    assert asked("지난주에 어디 다녀왔다고 했지?", TODAY) == [(date(2026, 11, 30), date(2026, 12, 6))]
    assert asked("어제 얘기한 거 기억나?", TODAY) == [(date(2026, 12, 6), date(2026, 12, 6))]
    assert asked("작년 여름에 뭐 했더라", TODAY) == [(date(2025, 6, 1), date(2025, 8, 31))]
    assert asked("요즘 뭐 해?", TODAY) == []
    assert asked("매주 화요일에 뭐 하지?", TODAY) == []  # a habit names no day
    assert asked("ㅋ" * 20_000 + " 어제", TODAY) == []  # a long paste is read for dates by its start only


def test_a_sentence_holds_only_its_absolute_days():
    assert held(JEJU) == [(date(2026, 11, 30), date(2026, 11, 30))]
    assert held("사용자의 생일은 3월 5일이다.") == []  # comes back every year
    assert held("사용자는 내일 병원에 간다.") == []  # an old relative word meant another day than today's tomorrow
    assert held(TRAVEL) == []
    assert held("사용자는 2026-12-08에 시험이 있었다.") == [(date(2026, 12, 8), date(2026, 12, 8))]


def test_said_on_is_the_session_s_date_or_a_person_s_and_late_telling_counts():
    days = {7: date(2026, 12, 1)}
    assert said_on({"session": 7, "step": "rewrite"}, days) == date(2026, 12, 1)
    assert said_on({"step": "user", "at": "2026-11-02T03:04:05+00:00"}, days) == date(2026, 11, 2)
    seoul = LocalTime("Asia/Seoul", ZoneInfo("Asia/Seoul")).day  # a person's edit at 16:00 UTC: the next day there
    assert said_on({"step": "user", "at": "2026-11-02T16:00:00+00:00"}, days, seoul) == date(2026, 11, 3)
    assert said_on({"step": "import", "said": "2023-05-08"}, days, seoul) == date(2023, 5, 8)  # a date stays itself
    assert said_on({"step": "import", "said": "not a date"}, days) is None
    assert said_on({"step": "import", "said": "2023-05-08"}, days) == date(2023, 5, 8)  # a corpus's own date
    assert said_on({"step": "import", "at": "2026-11-02T03:04:05+00:00"}, days) is None  # imported is not said
    assert said_on({"step": "restore", "at": "2026-11-02T03:04:05+00:00"}, days) is None
    assert said_on({"session": 8}, days) is None  # a session no longer in the store
    assert said_on(None, days) is None
    last_week = [(date(2026, 11, 30), date(2026, 12, 6))]
    assert meets(last_week, [], date(2026, 12, 6) + SAID_AFTER)  # told on the next Sunday: still about last week
    assert not meets(last_week, [], date(2026, 12, 6) + SAID_AFTER + timedelta(days=1))
    assert not meets(last_week, [], date(2026, 11, 29))  # said before the week began


def _commit(engine: MemoryEngine, uid: int, sentences: list[Sentence]) -> None:
    latest = engine.current(uid)
    engine.commit(
        uid, sentences, base=latest.number if latest else None, strategy="import", status="ok", author="import"
    )


def test_last_week_s_memory_comes_first_for_a_question_about_last_week(store: Store):
    engine = MemoryEngine(store, NgramEmbedder())
    uid = store.users.get_or_create("민지")
    _commit(engine, uid, [Sentence(BUSAN), Sentence(JEJU), Sentence(TRAVEL)])
    question = "지난주에 어디 여행 갔다고 했지?"
    hits = engine.search(uid, question, k=3, today=TODAY)
    assert hits[0].text == JEJU
    # a month later, "지난주" is another week: Jeju is no longer last week's, and ranks by its words alone
    later = {h.text: h.score for h in engine.search(uid, question, k=3, today=TODAY + timedelta(days=35))}
    assert hits[0].score == pytest.approx(later[JEJU] + WEIGHT)
    assert max(later, key=later.__getitem__) != JEJU
    # in October, "지난달" is September: Busan (October) is not in it either; "이번 달" is
    october = date(2026, 10, 20)
    assert engine.search(uid, "이번 달에 어디 여행 갔다고 했지?", k=1, today=october)[0].text == BUSAN
    # the dense method is e5 alone: no time weighs in
    dense = MemoryEngine(store, NgramEmbedder(), method="dense")
    assert {h.text: round(h.score, 4) for h in dense.search(uid, question, k=3, today=TODAY)} == {
        h.text: round(h.score, 4) for h in dense.search(uid, question, k=3, today=TODAY + timedelta(days=35))
    }


def test_what_a_session_wrote_is_found_by_the_day_it_was_said_where_the_user_lives(any_store: Store):
    """A sentence with no date in it is found by its session's date: "12월 1일에 무슨 얘기 했지?" finds what the
    session of that day wrote, that day being Seoul's (the session started at 16:00 UTC on 30 November)."""
    seoul = LocalTime("Asia/Seoul", ZoneInfo("Asia/Seoul"))
    engine = MemoryEngine(any_store, NgramEmbedder(), day=seoul.day)
    uid = any_store.users.get_or_create("서준")
    said = {}
    sessions = (
        ("사용자는 요즘 기타를 배운다.", "2026-11-30T16:00:00+00:00"),
        ("사용자는 요즘 수영을 배운다.", "2026-11-20T01:00:00+00:00"),
    )
    for text, started in sessions:
        sid = any_store.sessions.start(uid, "keem", "fake")
        any_store.execute("update sessions set started_at = ? where id = ?", [started, sid])
        said[text] = Sentence(text, "added", sources={"step": "rewrite", "session": sid})
    _commit(engine, uid, list(said.values()))
    hits = engine.search(uid, "12월 1일에 배운다고 한 게 뭐였지?", k=2, today=TODAY)
    assert hits[0].text == "사용자는 요즘 기타를 배운다."
    hits = engine.search(uid, "11월 20일에 배운다고 한 게 뭐였지?", k=2, today=TODAY)
    assert hits[0].text == "사용자는 요즘 수영을 배운다."
    # in UTC the guitar's session was on 30 November: the same question no longer finds it by its day
    utc = MemoryEngine(any_store, NgramEmbedder())
    scores = {h.text: h.score for h in utc.search(uid, "12월 1일에 배운다고 한 게 뭐였지?", k=2, today=TODAY)}
    assert abs(scores["사용자는 요즘 기타를 배운다."] - scores["사용자는 요즘 수영을 배운다."]) < WEIGHT


def test_a_chat_turn_searches_with_its_session_s_date(tmp_path):
    """The chat's own path: a Session searches with its `today`, so "어제" is the day before the session's date."""
    from tests.helpers import make_bot

    bot = make_bot(tmp_path / "keem.db")
    uid = bot.store.users.get_or_create("하린")
    # imported (an import is not said on any day): only the days the sentences name count
    _commit(bot.engine, uid, [Sentence(JEJU), Sentence(BUSAN), Sentence(TRAVEL)])
    session = bot.start("하린")
    session.today = date(2026, 12, 1)
    session.prepare("어제 어디 여행 갔다고 했지?")
    assert session.last_hits[0].text == JEJU
