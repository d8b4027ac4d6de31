"""Time in memory: relative times stored absolute when written, past plans put in the past, times read relative to
today, and the memory as it stood on a day (`keem memory show --as-of`, the memory tab)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from chatbot.cli.main import main as keem
from chatbot.localtime import local_time
from chatbot.web.memory_list import memory_list
from memory.dates import anchor, as_read, relative, settle
from memory.prompts import chat_system_prompt
from memory.store import Sentence, Store
from memory.updaters.timeline import put_in_time

SAID_ON = date(2026, 12, 3)  # a Thursday


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("사용자는 내일 면접이 있다.", "사용자는 2026년 12월 4일에 면접이 있다."),
        ("사용자는 다음 주 화요일에 시험이 있다.", "사용자는 2026년 12월 8일에 시험이 있다."),
        ("사용자는 3일 뒤에 이사한다.", "사용자는 2026년 12월 6일에 이사한다."),
        ("사용자는 이번 주말에 친구를 만난다.", "사용자는 2026년 12월 5일~6일 주말에 친구를 만난다."),
        ("사용자는 다음 달에 제주도에 간다.", "사용자는 2027년 1월에 제주도에 간다."),
        ("사용자는 작년 여름에 유럽 여행을 다녀왔다.", "사용자는 2025년 여름에 유럽 여행을 다녀왔다."),
        ("사용자는 12월 8일에 시험을 본다.", "사용자는 2026년 12월 8일에 시험을 본다."),
        ("사용자는 다음 주에 출장을 간다.", "사용자는 2026년 12월 둘째 주에 출장을 간다."),
        ("사용자는 모레 병원에 간다.", "사용자는 2026년 12월 5일에 병원에 간다."),
        ("사용자는 지난달 회사를 그만두었다.", "사용자는 2026년 11월에 회사를 그만두었다."),
        ("사용자는 이번 주 토요일이 생일이다.", "사용자는 12월 5일이 생일이다."),  # a birthday comes back each year
    ],
)
def test_relative_times_are_stored_absolute_with_the_words_said(said: str, stored: str) -> None:
    text, entries = anchor(said, SAID_ON)
    assert text == stored
    assert entries and all(e["on"] == "2026-12-03" and e["said"] in said and e["as"] in text for e in entries)


@pytest.mark.parametrize(
    "text",
    [
        "사용자는 매주 화요일에 수영을 한다.",  # a habit, not a day
        "사용자는 주말마다 등산을 간다.",
        "사용자는 다음 주제에 관심이 많다.",  # "다음 주" inside another word
        "사용자는 언젠가 유럽에 가고 싶다.",  # no time this module knows
        "사용자는 13월 40일에 뭔가를 한다.",  # no such day: kept as the words said
        "사용자는 2026년 12월 8일에 시험이 있다.",  # already absolute
        "",
        "🙂🙂 !!!",
    ],
)
def test_what_is_no_time_or_already_absolute_is_kept_as_written(text: str) -> None:
    assert anchor(text, SAID_ON) == (text, [])


def test_a_plan_whose_day_has_passed_is_put_in_the_past_and_what_recurs_or_goes_on_stays() -> None:
    later = date(2026, 12, 20)
    assert settle("사용자는 2026년 12월 8일에 시험이 있다.", later) == "사용자는 2026년 12월 8일에 시험이 있었다."
    assert settle("사용자는 2026년 12월 6일에 이사한다.", later) == "사용자는 2026년 12월 6일에 이사했다."
    assert settle("사용자는 2026년 12월 8일에 시험을 본다.", later) == "사용자는 2026년 12월 8일에 시험을 봤다."
    kept = [
        "사용자는 2027년 1월에 제주도에 간다.",  # still to come
        "사용자는 12월 5일이 생일이다.",  # comes back every year
        "사용자는 2026년 3월부터 요가 학원에 다닌다.",  # the start of something still going
        "사용자는 2026년 10월에 라식 수술을 받아 잘 보여서 기뻐한다.",  # a state now, after a past event
        "사용자는 2025년 여름에 유럽 여행을 다녀왔다.",  # already past
    ]
    assert [settle(t, later) for t in kept] == kept


def test_the_chat_reads_each_time_relative_to_today_in_korean() -> None:
    today = date(2026, 12, 11)  # a Friday
    assert relative("사용자는 2026년 12월 8일에 시험이 있다.", today) == (
        "사용자는 2026년 12월 8일(사흘 전)에 시험이 있었다."
    )
    assert relative("사용자는 2026년 12월 15일에 면접이 있다.", today) == (
        "사용자는 2026년 12월 15일(다음 주 화요일)에 면접이 있다."
    )
    assert relative("사용자는 2025년 여름에 유럽 여행을 다녀왔다.", today) == (
        "사용자는 2025년 여름(작년 여름)에 유럽 여행을 다녀왔다."
    )
    assert as_read("사용자는 고양이를 키운다.", today) is None  # nothing to add: shown once
    prompt = chat_system_prompt(["사용자는 2026년 12월 8일에 시험이 있다."], today, date(2026, 12, 3))
    assert "2026년 12월 8일(사흘 전)에 시험이 있었다" in prompt and "다음 주" not in prompt


def test_the_update_step_resolves_what_the_session_wrote_and_settles_what_it_carried() -> None:
    previous = [
        Sentence("사용자는 2026년 12월 8일에 시험이 있다.", "kept", id=1),
        Sentence("사용자는 다음 주에 이사한다.", "kept", id=2),  # written before times were resolved: when is unknown
        Sentence("사용자는 고양이를 키운다.", "kept", id=3),
    ]
    new = [
        *(Sentence(s.text, "kept", s.id) for s in previous),
        Sentence("사용자는 내일 면접이 있어 긴장한다.", "added"),
    ]
    out, report = put_in_time(previous, new, date(2026, 12, 10))
    texts = [s.text for s in out]
    assert texts == [
        "사용자는 2026년 12월 8일에 시험이 있었다.",
        "사용자는 다음 주에 이사한다.",
        "사용자는 고양이를 키운다.",
        "사용자는 2026년 12월 11일에 면접이 있어 긴장한다.",
    ]
    settled = out[0]  # a rewrite of the sentence it was: the changelog shows it, its records follow it
    assert settled.provenance == "rewritten" and settled.origin_id == 1 and settled.id is None
    assert out[1] == new[1] and out[2] == new[2]
    assert out[3].dates == ({"said": "내일", "as": "2026년 12월 11일", "on": "2026-12-10"},)
    assert report["settled"] == [{"from": previous[0].text, "to": texts[0]}] and len(report["resolved"]) == 1
    assert put_in_time(previous, new, None) == (new, {})  # no session date: nothing resolved, nothing lost


def test_a_sentence_whose_times_cannot_be_read_is_kept_as_written_and_the_update_lands(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import memory.updaters.timeline as timeline

    def broken(text: str, today: date) -> str:
        raise ValueError("a rule that does not hold")

    monkeypatch.setattr(timeline, "settle", broken)
    new = [Sentence("사용자는 내일 면접이 있다.", "added"), Sentence("사용자는 고양이를 키운다.", "added")]
    out, report = put_in_time([], new, date(2026, 12, 10))
    assert out == new and report == {}
    assert "면접" not in caplog.text and "left as written" in caplog.text  # no memory text in the log


def _two_versions(path: Path) -> None:
    """민수's memory: v1 written on 2026-11-30 (KST), v2 now."""
    store = Store(path)
    uid = store.users.get_or_create("민수")
    v1 = [Sentence("사용자는 2026년 12월 8일에 시험이 있다.", "added"), Sentence("사용자는 서울에 산다.", "added")]
    store.versions.commit(uid, v1, base=None, strategy="keem", status="ok", author="updater")
    v2 = [Sentence("사용자는 2026년 12월 8일에 시험을 봤다.", "added"), Sentence("사용자는 부산에 산다.", "added")]
    store.versions.commit(uid, v2, base=1, strategy="keem", status="ok", author="updater")
    with store.write():
        store.execute("update memory_versions set created_at = ? where number = 1", ["2026-11-30T03:00:00+00:00"])
    store.close()


def test_keem_memory_show_as_of_a_day_shows_the_memory_of_then_read_as_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "keem.db"
    _two_versions(db)
    assert keem(["memory", "show", "--user", "민수", "--db", str(db), "--as-of", "2026-12-01"]) == 0
    out = capsys.readouterr().out
    assert "memory v1" in out and "as it stood on 2026-12-01" in out and "부산" not in out
    assert "- 사용자는 2026년 12월 8일에 시험이 있다." in out  # stored, and read as on that day:
    assert "2026-12-01 기준: 사용자는 2026년 12월 8일(다음 주 화요일)에 시험이 있다." in out
    assert keem(["memory", "show", "--user", "민수", "--db", str(db), "--as-of", "2026-12-01", "--json"]) == 0
    shown = __import__("json").loads(capsys.readouterr().out)
    assert shown["version"] == 1 and shown["read_on"] == "2026-12-01"
    assert shown["sentences"][0]["as_read"].endswith("(다음 주 화요일)에 시험이 있다.")
    assert "as_read" not in shown["sentences"][1]
    assert keem(["memory", "show", "--user", "민수", "--db", str(db)]) == 0
    assert "memory v2" in capsys.readouterr().out
    assert keem(["memory", "show", "--user", "민수", "--db", str(db), "--as-of", "2026-11-01"]) == 2
    assert "had no memory yet on 2026-11-01" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        keem(["memory", "show", "--user", "민수", "--db", str(db), "--as-of", "12/01"])
    assert "give one as YYYY-MM-DD" in capsys.readouterr().err


def test_the_memory_tab_shows_each_sentence_stored_and_read_today(tmp_path: Path) -> None:
    store = Store(tmp_path / "keem.db")
    uid = store.users.get_or_create("민수")
    sentences = [Sentence("사용자는 2020년 3월 2일에 입학식이 있다.", "added"), Sentence("사용자는 서울에 산다.")]
    version = store.versions.commit(uid, sentences, base=None, strategy="keem", status="ok", author="updater")
    shown = memory_list(version, [], local_time("Asia/Seoul"))
    first, second = (r.shown for r in shown.rows)
    assert "2020년 3월 2일에 입학식이 있다" in first  # as stored (what its edit box holds) ...
    assert (
        "오늘 기준: 사용자는 2020년 3월 2일\\(" in first and "년 전\\)에 입학식이 있었다" in first
    )  # ... and read today
    assert "오늘 기준" not in second and shown.rows[0].text == sentences[0].text
    store.close()


def test_erasing_a_sentence_whose_time_was_resolved_redacts_the_turn_that_said_it_in_relative_words(
    tmp_path: Path,
) -> None:
    """ "다음 달에 제주도로 이사 가" is stored with "2027년 1월" or so: the stored date is when, not what, so the turn
    that said it is still found as its source and leaves no copy."""
    import sqlite3

    from tests.helpers import make_bot

    bot = make_bot(tmp_path / "keem.db")
    session = bot.start("민수")
    said = ["나 다음 달에 제주도로 이사 가", "설레겠네요!", "그리고 강아지를 키우기 시작했어", "이름이 뭐예요?"]
    session.record_turns(list(zip(("user", "assistant") * 2, said, strict=True)))
    version = bot.run_update(session.end())
    assert version is not None
    (moving,) = [s.text for s in version.sentences if "제주도" in s.text]
    assert "다음 달" not in moving and "월" in moving  # stored absolute
    bot.forget_sentence(session.user_id, moving)
    bot.store.close()
    with sqlite3.connect(tmp_path / "keem.db") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
        left = [(t, row) for t in tables for row in db.execute(f"select * from {t}") if "제주도" in str(row)]
    assert left == []


def test_a_sentence_a_person_writes_is_stored_with_its_dates_as_an_update_s(tmp_path: Path) -> None:
    """The memory tab and the API share chatbot/edits.py: "다음 주 화요일" written today is that Tuesday's date,
    with the words written beside it; an edit the same; a plan already past reads as past."""
    from chatbot import edits
    from memory.engine import MemoryEngine
    from models.embedders import NgramEmbedder

    store = Store(tmp_path / "keem.db")
    engine = MemoryEngine(store, NgramEmbedder(), day=lambda when: SAID_ON)  # "today" is 2026-12-03 here
    uid = store.users.get_or_create("민수")
    version = edits.add(engine, uid, "사용자는 다음 주 화요일에 치과에 간다.")
    (dentist,) = version.sentences
    assert dentist.text == "사용자는 2026년 12월 8일에 치과에 간다."
    assert [(d["said"], d["as"]) for d in dentist.dates] == [("다음 주 화요일", "2026년 12월 8일")]
    version = edits.edit(engine, uid, version, 0, "사용자는 어제 치과에 가기로 했다.")
    (dentist,) = version.sentences
    assert dentist.text == "사용자는 2026년 12월 2일에 치과에 가기로 했다." and dentist.provenance == "user"
    version = edits.add(engine, uid, "사용자는 서울에 산다.")  # no time: as written
    assert version.sentences[1].text == "사용자는 서울에 산다." and version.sentences[1].dates == ()
    store.close()
