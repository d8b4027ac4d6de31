"""Stored times are UTC; the page, the trial export and the CLI show them in one zone (Korea's unless
KEEM_TIMEZONE says otherwise), always with the zone named (chatbot/localtime.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chatbot.bot import Chatbot
from chatbot.cli.main import main
from chatbot.localtime import KOREA, local_time
from chatbot.settings import Settings
from chatbot.study import refusal, refusal_message
from chatbot.trials.export import export
from chatbot.web.messages import korean_error
from chatbot.web.render import memory_header, render_jobs
from memory.provenance import attach
from memory.store import Sentence
from models.embedders import NgramEmbedder
from models.errors import InputError
from models.fake import ScriptedChatModel

UTC_NOON = "2026-11-03T11:00:00+00:00"  # 20:00 in Seoul, 12:00 in Berlin (winter), 08:00 in São Paulo


def test_a_stored_utc_time_is_shown_in_korea_with_the_zone_named():
    seoul = local_time(KOREA)
    assert seoul.minute(UTC_NOON) == "2026-11-03 20:00" and seoul.stamp(UTC_NOON) == "2026-11-03 20:00 KST"
    assert seoul.iso(UTC_NOON) == "2026-11-03T20:00:00+09:00" and seoul.korean == "한국 시간"
    assert seoul.minute("2026-11-03T11:00:01+00:00", round_up=True) == "2026-11-03 20:01"
    assert seoul.stamp(None) == "-" and seoul.iso(None) is None and seoul.iso("") == ""
    assert seoul.minute("2026-11-03T11:00:00") == "2026-11-03 20:00"  # a time without a zone is UTC
    berlin, brazil = local_time("Europe/Berlin"), local_time("America/Sao_Paulo")
    assert berlin.stamp(UTC_NOON) == "2026-11-03 12:00 CET" and berlin.korean in ("CET", "CEST")
    assert berlin.stamp("2026-07-03T11:00:00+00:00") == "2026-07-03 13:00 CEST"
    assert brazil.stamp(UTC_NOON) == "2026-11-03 08:00 UTC-03:00"  # a zone whose abbreviation is only an offset


def test_keem_timezone_chooses_the_zone_and_a_wrong_one_is_one_line():
    assert Settings.load({}).local_time.name == "Asia/Seoul"
    assert Settings.load({"KEEM_TIMEZONE": "UTC"}).local_time.stamp(UTC_NOON) == "2026-11-03 11:00 UTC"
    with pytest.raises(InputError, match="KEEM_TIMEZONE='Mars/Base' is not a time zone; give an IANA name"):
        Settings.load({"KEEM_TIMEZONE": "Mars/Base"})


def test_a_trial_refusal_names_the_zone_it_is_written_in():
    when = datetime(2026, 11, 3, 11, 0, 30, tzinfo=timezone.utc)
    seoul = local_time(KOREA)
    assert refusal_message(when, seoul) == "다음 대화는 2026-11-03 20:01 (한국 시간) 이후에 할 수 있습니다."
    assert korean_error(refusal(when, seoul)) == refusal_message(when, seoul)
    utc = local_time("UTC")
    assert korean_error(refusal(when, utc)) == "다음 대화는 2026-11-03 11:01 (UTC) 이후에 할 수 있습니다."


def _bot(db: Path, **settings: str) -> Chatbot:
    return Chatbot(
        Settings(db=str(db), **settings),
        chat_model=ScriptedChatModel(responder=lambda m: "응"),
        embedder=NgramEmbedder(),
    )


def test_the_memory_tab_the_export_and_the_cli_show_the_same_korean_time(tmp_path, monkeypatch, capsys):
    db = tmp_path / "t.db"
    bot = _bot(db)
    session = bot.start("민수")
    session.record("나 부산에 살아")
    list(session.reply())
    said = bot.store.turns.of_session(session.session_id)  # the update's sources: the turn that said it
    sentences = attach(
        [],
        [Sentence("사용자는 부산에 산다.")],
        details={},
        status="ok",
        turns=said,
        session_id=session.session_id,
        embedder=None,
    )
    version = bot.engine.commit(session.user_id, sentences, base=None, strategy="keem", status="ok", author="updater")
    stored = datetime.fromisoformat(version.created_at)
    assert stored.utcoffset().total_seconds() == 0  # the database keeps UTC
    local = bot.settings.local_time  # KEEM_TIMEZONE unset: Korea's
    korean = local_time(KOREA).stamp(version.created_at)
    assert korean.endswith(" KST") and korean[:16] != version.created_at[:16].replace("T", " ")
    versions = bot.store.versions.of_user(session.user_id)
    from chatbot.web.why import render_versions
    from memory.changelog import changelogs

    assert korean in memory_header(version, local) and korean in render_versions(
        versions, changelogs(bot.store, versions), True, local
    )
    jobs = [{"status": "pending", "created_at": version.created_at, "attempts": 0, "stage": "queued"}]
    assert korean in render_jobs(jobs, local)
    export(bot.store, tmp_path / "out", scrub=False, local=local)
    line = json.loads((tmp_path / "out" / "sessions.jsonl").read_text(encoding="utf-8").splitlines()[0])
    times = [line["started_at"], *(t["at"] for t in line["turns"])]
    assert all(t.endswith("+09:00") for t in times), times
    exported = json.loads((tmp_path / "out" / "memory_versions.jsonl").read_text(encoding="utf-8"))
    assert exported["created_at"] == local_time(KOREA).iso(version.created_at)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["timezone"] == "Asia/Seoul" and manifest["created_at"].endswith("+09:00")
    # the changelog, a sentence's 왜? and 지난 대화 too (chatbot/web/why.py, past.py), and their JSON
    from chatbot.web.past import transcript
    from chatbot.web.why import render_changelog, render_why
    from memory.changelog import changelog
    from memory.provenance import explain_all

    log = changelog(bot.store, None, version)
    (why,) = explain_all(bot.store, version)
    assert why.quotes and why.quotes[0].text == "나 부산에 살아"
    quoted = local_time(KOREA).stamp(why.quotes[0].at)
    assert quoted.endswith(" KST") and quoted in render_why(why, local)
    assert quoted in render_changelog(log, "v1", local)
    assert all(at.endswith("+09:00") for at in (q["at"] for q in why.as_json(local_time(KOREA).iso)["quotes"]))
    session.end()
    stored = bot.store.sessions.of_user(session.user_id)[-1]
    shown = transcript(stored, bot.store.turns.of_session(stored["id"]), local)
    assert f"{local_time(KOREA).stamp(stored['started_at'])}에 시작한 대화" in shown
    exported_why = exported["provenance"][0]
    assert all(q["at"].endswith("+09:00") for q in exported_why["quotes"])
    monkeypatch.setenv("KEEM_DB", str(db))
    assert main(["memory", "history", "--user", "민수"]) == 0
    assert f"v1  {korean}" in capsys.readouterr().out
    assert main(["memory", "show", "--user", "민수", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["created_at"] == local_time(KOREA).iso(version.created_at)
    monkeypatch.setenv("KEEM_TIMEZONE", "UTC")
    assert main(["memory", "users"]) == 0
    assert f"(last {local_time('UTC').stamp(session_start(bot, session.user_id))})" in capsys.readouterr().out


def session_start(bot: Chatbot, user_id: int) -> str:
    return str(bot.store.sessions.of_user(user_id)[-1]["started_at"])


def test_a_keem_timezone_other_than_seoul_reaches_the_page_and_both_trial_exports(tmp_path, monkeypatch):
    """KEEM_TIMEZONE is a setting passed down, never a guess: with Europe/Berlin the memory tab's version stamp,
    지난 대화, a trial's refusal and card, the organiser's export and `keem trial export` all show Berlin's time,
    so any path that quietly fell back to Seoul's fails here."""
    import zipfile

    from chatbot.study import study_from_dict
    from chatbot.trials.web import Limiter, trial_page
    from chatbot.web.app import build_app
    from chatbot.web.past import Past
    from chatbot.worker import Worker
    from tests.helpers import PLAN, chat_state, enter, make_bot, say, wait_job

    db = tmp_path / "keem.db"
    bot = make_bot(db, strategy="balanced", timezone="Europe/Berlin")
    berlin, seoul = local_time("Europe/Berlin"), local_time(KOREA)
    assert bot.settings.local_time == berlin
    worker = Worker(bot, poll_s=0.05)
    study = study_from_dict(PLAN)
    app = build_app(bot, worker, study=study, trial=trial_page(study, "organiser-pw"))
    sui, ui = app.keem_study.ui, app.keem_ui
    worker.start()
    try:
        person = sui.agree(enter(sui, "P007")[0], True).person
        state = chat_state(sui, person)
        assert state is not None
        say(ui, "나 지난주에 부산으로 이사했어", state)
        assert "대기 중" in ui.chat.end_session(state).progress
        done = wait_job(ui, state)
        version = bot.store.versions.latest(state.user_id)
        assert berlin.stamp(version.created_at) != seoul.stamp(version.created_at)
        assert berlin.stamp(version.created_at) in done.memory.text  # the memory's header
        assert seoul.stamp(version.created_at) not in done.memory.text + done.changelog
        started = bot.store.sessions.of_user(state.user_id)[-1]["started_at"]
        past = Past(ui.ctx)  # 지난 대화, on the chat page's context
        choices = past.listing(state).past_pick["choices"]
        assert choices and choices[0][0].startswith(berlin.stamp(started))
        shown = past.show(choices[0][1], state).transcript
        assert f"{berlin.stamp(started)}에 시작한 대화" in shown and seoul.stamp(started) not in shown
        # a trial's refusal and the card after the end name Berlin's minute and zone
        card = sui.after_end(state, person).again["value"]
        assert f"({berlin.korean})" in card and "한국 시간" not in card
        _, out = enter(sui, "P007")
        assert f"({berlin.korean})" in out.gate_note and "한국 시간" not in out.gate_note
        # the organiser's export (the page) and `keem trial export` (the CLI)
        sui.organiser.limiter = Limiter(0)
        granted = sui.organiser.unlock("organiser-pw", None).granted
        with zipfile.ZipFile(sui.organiser.download(granted).archive) as z:
            organisers = {Path(n).name: z.read(n).decode("utf-8") for n in z.namelist()}
    finally:
        worker.stop()
    monkeypatch.setenv("KEEM_DB", str(db))
    monkeypatch.setenv("KEEM_TIMEZONE", "Europe/Berlin")
    assert main(["trial", "export", "--out", str(tmp_path / "cli")]) == 0
    cli = {n: (tmp_path / "cli" / n).read_text(encoding="utf-8") for n in ("sessions.jsonl", "manifest.json")}
    for files in (organisers, cli):
        assert json.loads(files["manifest.json"])["timezone"] == "Europe/Berlin"
        exported = json.loads(files["sessions.jsonl"].splitlines()[0])
        assert exported["started_at"] == berlin.iso(started) != seoul.iso(started)
