"""Multi-session user trials: balanced strategy assignment that sticks, a blind memory view, and the export."""

from __future__ import annotations

import csv
import json

import pytest

from chatbot.cli import main
from chatbot.render import render_history
from chatbot.session import Chatbot
from chatbot.settings import Settings
from memory.updaters import STRATEGIES
from models.embedders import NgramEmbedder
from models.errors import InputError
from models.fake import ScriptedChatModel


def _bot(db, strategy="balanced") -> Chatbot:
    return Chatbot(Settings(db=str(db), strategy=strategy), chat_model=ScriptedChatModel(responder=lambda m: "응"),
                   embedder=NgramEmbedder())


def test_balanced_gives_each_participant_one_strategy_evenly_and_keeps_it(tmp_path):
    bot = _bot(tmp_path / "t.db")
    first = {name: bot.start(name).strategy for name in ("p1", "p2", "p3", "p4", "p5", "p6")}
    assert sorted(first.values()) == sorted(STRATEGIES * 2)            # 2 each of 3
    again = _bot(tmp_path / "t.db")                                     # a restart does not reshuffle
    assert {name: again.start(name).strategy for name in first} == first
    assert again.start("p7").strategy == STRATEGIES[0]                 # ties go to the first strategy


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

    bot.engine.commit(session.user_id, [Sentence("사용자는 고양이를 키운다")], strategy=session.strategy,
                      status="ok", author="updater")
    versions = bot.store.versions(session.user_id)
    assert session.strategy in render_history(versions)
    assert session.strategy not in render_history(versions, show_strategy=False)


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
    assert main(["trial", "export", "--out", str(out)]) == 2               # never over an earlier export
    assert "not empty" in capsys.readouterr().err
