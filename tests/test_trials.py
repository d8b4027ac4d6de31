"""Multi-session user trials: balanced strategy assignment that sticks, a blind memory view, and the export."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatbot.bot import Chatbot
from chatbot.cli.main import main
from chatbot.localtime import KOREA, local_time
from chatbot.settings import Settings
from chatbot.web.why import render_versions
from memory.changelog import changelogs
from memory.updaters import STRATEGIES
from models.embedders import NgramEmbedder
from models.errors import InputError
from models.fake import ScriptedChatModel


def _bot(db, strategy="balanced") -> Chatbot:
    return Chatbot(
        Settings(db=str(db), strategy=strategy),
        chat_model=ScriptedChatModel(responder=lambda m: "응"),
        embedder=NgramEmbedder(),
    )


def test_balanced_gives_each_participant_one_strategy_evenly_and_keeps_it(tmp_path):
    bot = _bot(tmp_path / "t.db")
    first = {name: bot.start(name).strategy for name in ("p1", "p2", "p3", "p4", "p5", "p6")}
    assert sorted(first.values()) == sorted(STRATEGIES * 2)  # 2 each of 3
    again = _bot(tmp_path / "t.db")  # a restart does not reshuffle
    assert {name: again.start(name).strategy for name in first} == first
    assert again.start("p7").strategy == STRATEGIES[0]  # ties go to the first strategy


def test_an_export_never_carries_a_browser_key(tmp_path, monkeypatch, capsys):
    bot = _bot(tmp_path / "t.db")
    key = "0123456789abcdef0123456789abcdef"
    session = bot.start("민수", browser_key=key)
    list(session.send("안녕"))
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "t.db"))
    assert main(["trial", "export", "--out", str(tmp_path / "x")]) == 0
    for path in (tmp_path / "x").iterdir():
        assert key not in path.read_text(encoding="utf-8")
    assert "민수#012345" in (tmp_path / "x" / "participants.csv").read_text(encoding="utf-8")


def test_an_unknown_strategy_names_the_choices(tmp_path):
    with pytest.raises(InputError, match="balanced"):
        _bot(tmp_path / "t.db", strategy="random").start("p1")


def test_history_hides_the_strategy_from_a_blind_participant(tmp_path):
    bot = _bot(tmp_path / "t.db")
    session = bot.start("p1")
    from memory.store import Sentence

    bot.engine.commit(
        session.user_id,
        [Sentence("사용자는 고양이를 키운다")],
        base=None,
        strategy=session.strategy,
        status="ok",
        author="updater",
    )
    versions = bot.store.versions.of_user(session.user_id)
    logs = changelogs(bot.store, versions, blind=True)
    assert session.strategy in render_versions(versions, logs, show_strategy=True, local=local_time(KOREA))
    assert session.strategy not in render_versions(versions, logs, show_strategy=False, local=local_time(KOREA))


def test_trial_export_writes_every_participant_session_turn_and_version(tmp_path, monkeypatch, capsys):
    db = tmp_path / "t.db"
    bot = _bot(db)
    for name in ("민수", "지우"):
        for text in ("안녕", "오늘 시험 봤어"):
            session = bot.start(name)
            list(session.send(text))
            job = session.end()
            bot.run_update(job)
    monkeypatch.setenv("KEEM_DB", str(db))
    out = tmp_path / "export"
    assert main(["trial", "export", "--out", str(out), "--pseudonymize", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert (counts["participants"], counts["sessions"], counts["turns"]) == (2, 4, 8)
    rows = list(csv.DictReader(open(out / "participants.csv", encoding="utf-8")))
    assert [r["participant"] for r in rows] == ["P001", "P002"] and {r["sessions"] for r in rows} == {"2"}
    assert [r["strategy"] for r in rows] == list(STRATEGIES[:2])
    sessions = [json.loads(line) for line in open(out / "sessions.jsonl", encoding="utf-8")]
    assert sessions[0]["turns"][0] == {"role": "user", "text": "안녕", "at": sessions[0]["turns"][0]["at"]}
    assert "민수" not in (out / "sessions.jsonl").read_text(encoding="utf-8")
    versions = [json.loads(line) for line in open(out / "memory_versions.jsonl", encoding="utf-8")]
    assert len(versions) == counts["versions"] >= 2 and all(v["sentences"] for v in versions)
    key = list(csv.DictReader(open(out / "key.csv", encoding="utf-8")))
    assert {(k["participant"], k["name"]) for k in key} == {("P001", "민수"), ("P002", "지우")}
    assert main(["trial", "export", "--out", str(out)]) == 2  # never over an earlier export
    assert "not empty" in capsys.readouterr().err


# -- the trial loop: PII-safe export, questionnaires, the report ----------------------------------------
PII = ("010-2345-6789", "minji.kim@example.com", "900101-2345678", "서울시 마포구 월드컵로 212")
STUDY = """id = "pilot"
title = "기억하는 챗봇"
strategies = ["keem", "accumulate", "operations"]
sessions = 2
min_gap_hours = 0
consent = "동의합니다"
"""


def _echo_bot(db) -> Chatbot:
    """Replies repeat what the participant said (so replies carry their personal data too); updates say "응"."""
    return Chatbot(
        Settings(db=str(db), strategy="balanced"),
        chat_model=ScriptedChatModel(responder=lambda m: f"{m[-1]['content']} 말이지?"),
        update_model=ScriptedChatModel(responder=lambda m: "응"),
        embedder=NgramEmbedder(),
    )


def _held(bot: Chatbot, name: str, *texts: str):
    session = bot.start(name)
    for text in texts:
        list(session.send(text))
    bot.run_update(session.end())
    return session


def test_an_export_carries_no_personal_data_only_tags_and_the_database_keeps_it(tmp_path, monkeypatch, capsys):
    from chatbot.study import load_study, submit_answers
    from memory.store import Sentence

    db = tmp_path / "t.db"
    bot = _echo_bot(db)
    session = _held(bot, "민지", *(f"내 정보는 {p} 이야" for p in PII))
    bot.engine.commit(
        session.user_id,
        [Sentence("사용자의 전화번호는 010-2345-6789이다"), Sentence("사용자는 고양이를 키운다")],
        cues={"사용자의 전화번호는 010-2345-6789이다": "전화 010-2345-6789"},
        base=bot.engine.current(session.user_id).number,  # on top of the session's update
        strategy=session.strategy,
        status="ok",
        author="updater",
        session_id=session.session_id,
    )
    (tmp_path / "study.toml").write_text(STUDY, encoding="utf-8")
    study = load_study(tmp_path / "study.toml")
    submit_answers(
        bot.store,
        session.session_id,
        session.user_id,
        study,
        {
            "remembered": 5,
            "understood": 4,
            "natural": 4,
            "again": 5,
            "comment": "연락은 minji.kim@example.com 이나 01023456789 로",
        },
    )
    _held(bot, "minji.kim@example.com", "안녕")  # a login may be an e-mail address
    monkeypatch.setenv("KEEM_DB", str(db))
    out = tmp_path / "x"
    assert main(["trial", "export", "--out", str(out)]) == 0
    printed = capsys.readouterr().out  # typed, echoed, in the memory and its cues, answered
    # (memory_versions.jsonl quotes the user's words again, in each sentence's provenance and the changelog)
    assert re.search(r"\[전화번호\] ([5-9]|\d\d)", printed) and re.search(r"\[주소\] ([2-9]|\d\d)", printed)
    files = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    assert set(files) == {
        "participants.csv",
        "sessions.jsonl",
        "memory_versions.jsonl",
        "questionnaire.csv",
        "manifest.json",
    }
    for name, text in files.items():
        for p in (*PII, "01023456789", "2345-6789"):
            assert p not in text, (name, p)
    assert all(tag in files["sessions.jsonl"] for tag in ("[전화번호]", "[이메일]", "[주민등록번호]", "[주소]"))
    assert "[전화번호]" in files["memory_versions.jsonl"] and "전화 [전화번호]" in files["memory_versions.jsonl"]
    rows = list(csv.DictReader(open(out / "questionnaire.csv", encoding="utf-8")))
    assert len(rows) == 5 and {r["strategy"] for r in rows} == {session.strategy} and rows[0]["session_number"] == "1"
    assert rows[-1]["value"] == "연락은 [이메일] 이나 [전화번호] 로"
    manifest = json.loads(files["manifest.json"])
    assert manifest["scrubbed"] is True and manifest["pii_replaced"]["[이메일]"] >= 3
    assert manifest["counts"]["answers"] == 5
    assert [r["participant"] for r in csv.DictReader(open(out / "participants.csv", encoding="utf-8"))] == [
        "민지",
        "[이메일]-P002",
    ]
    assert "010-2345-6789" in bot.store.turns.of_session(session.session_id)[0]["text"]  # only exports are scrubbed

    assert main(["trial", "export", "--out", str(tmp_path / "raw"), "--no-scrub", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning: --no-scrub" in captured.err and json.loads(captured.out)["pii"]["phone"] == 0
    assert "010-2345-6789" in (tmp_path / "raw" / "sessions.jsonl").read_text(encoding="utf-8")


# -- an export is written whole or not at all --------------------------------------------------------------
EXPORTED = {"participants.csv", "sessions.jsonl", "memory_versions.jsonl", "questionnaire.csv", "manifest.json"}


def _trial_db(tmp_path, monkeypatch):
    """A trial of two participants whose export is some 40 kB (long turns, echoed), as KEEM_DB."""
    db = tmp_path / "t.db"
    bot = _echo_bot(db)
    for name in ("민지", "지우"):
        session = bot.start(name)
        for i in range(8):
            list(session.send(f"{i}번째 이야기: " + "오늘 있었던 일을 길게 적어 볼게. " * 20))
    monkeypatch.setenv("KEEM_DB", str(db))


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_an_export_on_a_full_disk_is_one_line_leaves_nothing_and_a_retry_works(tmp_path, monkeypatch, capsys):
    from tests.conftest import fill, tmpfs

    _trial_db(tmp_path, monkeypatch)
    with tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk)
        filler = disk / "filler"
        os.truncate(filler, filler.stat().st_size - 16 * 1024)  # room for a file or two, not for the export
        out = disk / "trial" / "export"
        assert main(["trial", "export", "--out", str(out)]) == 2
        err = _one_line_error(capsys)
        assert "is full" in err and "free space" in err and str(out) in err
        assert os.listdir(disk) == ["filler"]  # no half-written folder, no hidden one, not even trial/

        filler.unlink()
        assert main(["trial", "export", "--out", str(out)]) == 0  # the same command, once there is room
        assert {p.name for p in out.iterdir()} == EXPORTED
        assert sorted(os.listdir(out.parent)) == ["export"]
        assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["counts"]["participants"] == 2


@contextlib.contextmanager
def _unwritable(tmp_path) -> Iterator[Path]:
    """A folder nobody may write in: a read-only mount for root (who writes through permissions), else mode 555."""
    if os.geteuid() == 0:
        from tests.conftest import tmpfs

        with tmpfs(tmp_path / "ro", "1m") as disk:
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
            yield disk
    else:
        folder = tmp_path / "ro"
        folder.mkdir(mode=0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)


def test_an_export_to_a_place_it_cannot_write_is_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    _trial_db(tmp_path, monkeypatch)
    with _unwritable(tmp_path) as place:
        assert main(["trial", "export", "--out", str(place / "export")]) == 2
        err = _one_line_error(capsys)
        assert ("read-only" in err or "no permission" in err) and "give --out a folder" in err
        assert os.listdir(place) == []
    (tmp_path / "notes.txt").write_text("메모", encoding="utf-8")
    for out in (tmp_path / "notes.txt", tmp_path / "notes.txt" / "export"):  # a file where a folder should be
        assert main(["trial", "export", "--out", str(out)]) == 2
        assert "is a file, not a folder" in _one_line_error(capsys)
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "메모"
    (tmp_path / "empty").mkdir()  # an empty folder is a new one
    assert main(["trial", "export", "--out", str(tmp_path / "empty")]) == 0
    assert {p.name for p in (tmp_path / "empty").iterdir()} == EXPORTED


def test_the_report_compares_every_strategy_with_ratings_tests_and_plots(tmp_path, monkeypatch, capsys):
    from chatbot.study import load_study, submit_answers

    db = tmp_path / "t.db"
    bot = _bot(db)
    (tmp_path / "study.toml").write_text(STUDY, encoding="utf-8")
    study = load_study(tmp_path / "study.toml")
    score = {"keem": 5, "accumulate": 3, "operations": 2}
    for i in range(6):  # two participants per strategy (balanced), two sessions
        for n in (1, 2):
            if i == 5 and n == 2:  # the last participant drops out
                continue
            session = bot.start(f"p{i}")
            list(session.send("오늘 시험 봤어"))
            bot.run_update(session.end())
            if i == 4 and n == 2:  # and one questionnaire stays unanswered
                continue
            value = score[session.strategy] - (i >= 3) * (n == 2)
            submit_answers(
                bot.store,
                session.session_id,
                session.user_id,
                study,
                {"remembered": value, "understood": value, "natural": 3, "again": value},
            )
    monkeypatch.setenv("KEEM_DB", str(db))
    monkeypatch.setenv("KEEM_STUDY", str(tmp_path / "study.toml"))
    assert main(["trial", "export", "--out", str(tmp_path / "x")]) == 0
    assert main(["trial", "report", "--export", str(tmp_path / "x"), "--out", str(tmp_path / "r")]) == 0
    assert "report.md" in capsys.readouterr().out
    report = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    for strategy in STRATEGIES:
        assert f"| {strategy} |" in report
    assert "Kruskal-Wallis" in report and "p (Holm)" in report and "챗봇이 지난 대화를 기억했다" in report
    assert {"ratings.png", "memory_size.png", "turns.png", "ratings_remembered.png"} <= {
        p.name for p in (tmp_path / "r").glob("*.png")
    }
    result = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    keem = result["ratings"]["overall"]["keem"]["remembered"]
    assert keem["n"] == 2 and keem["mean"] == pytest.approx(4.75)  # participant means 5 and 4.5
    assert result["ratings"]["tests"]["natural"]["skipped"] == "every rating is the same"
    assert result["ratings"]["tests"]["remembered"]["kruskal"]["df"] == 2
    assert len(result["ratings"]["tests"]["remembered"]["pairs"]) == 3
    dropped = {s: result["participation"][s]["dropped_out"] for s in STRATEGIES}
    assert sum(dropped.values()) == 1 and result["planned_sessions"] == 2
    assert all(result["memory"][s]["1"]["n"] == 2 for s in STRATEGIES)


def test_the_report_of_an_export_without_ratings_says_so(tmp_path, monkeypatch, capsys):
    db = tmp_path / "t.db"
    bot = _bot(db)
    for name in ("민수", "지우"):
        _held(bot, name, "안녕")
    monkeypatch.setenv("KEEM_DB", str(db))
    assert main(["trial", "export", "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    assert main(["trial", "report", "--export", str(tmp_path / "x"), "--out", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["report"] == str(tmp_path / "r" / "report.md")
    report = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "No questionnaire ratings" in report and "| keem |" in report and "| accumulate |" in report
    assert (tmp_path / "r" / "memory_size.png").stat().st_size > 0 and not (tmp_path / "r" / "ratings.png").exists()
    assert main(["trial", "report", "--export", str(tmp_path / "nope"), "--out", str(tmp_path / "r2")]) == 2
    assert "give --export the folder" in capsys.readouterr().err
    (tmp_path / "x" / "manifest.json").write_text('{"trial": ', encoding="utf-8")  # a file cut short
    assert main(["trial", "report", "--export", str(tmp_path / "x"), "--out", str(tmp_path / "r3")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json is not valid JSON" in err and "export the trial again" in err and "Traceback" not in err


def test_the_report_statistics_match_their_textbook_values():
    from chatbot.trials.stats import compare, holm, mean_ci

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    summary = mean_ci([2, 3, 4, 5])  # mean 3.5, sd 1.29, t(0.975, 3) = 3.182
    assert summary["mean"] == 3.5 and summary["ci95"] == pytest.approx([1.4457, 5.5543], abs=1e-3)
    assert mean_ci([2, 3, 4, 5], bounds=(1, 5))["ci95"][1] == 5.0 and mean_ci([4])["ci95"] is None
    result = compare({"keem": [5, 5, 4], "accumulate": [1, 2, 2], "operations": []})
    assert result["kruskal"]["df"] == 1 and result["pairs"][0]["r"] == 1.0  # an empty group takes no part
    assert compare({"keem": [3, 3], "accumulate": [3]})["skipped"] == "every rating is the same"


def test_the_trial_commands_have_help_with_an_example(capsys):
    for argv in (["trial", "--help"], ["trial", "export", "--help"], ["trial", "report", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0 and "example:" in capsys.readouterr().out
