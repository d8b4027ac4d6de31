"""Forgetting with the app running: after "나를 잊기" of a trial participant, or "완전히 지우기" of one
sentence, a byte search of every file under the data directory (db, -wal, -shm), the backup folder and Gradio's
file cache (where the organiser's export zips live) finds none of the erased strings; the rest stays."""

from __future__ import annotations

import io
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatbot.exports import Exports
from chatbot.study import study_from_dict
from chatbot.study_records import records
from memory.store import MARKER, Sentence
from tests.erasure_world import leftovers
from tests.helpers import PLAN, call, chat_state, dep_index, enter, refused, say, serve, wait_job

NAME = "참가자보라매"
PHONE = "010-2741-9386"
TOLD = f"내 번호는 {PHONE}이야 잊지 마"
PLACE = "사용자는 망원동 빵집 단골이다"
PLACE_TURN = "나 망원동 빵집 단골이야"
DELETED = "사용자는 청록색 자전거를 도둑맞았다"
COMMENT = "분홍코끼리 인형 이야기가 제일 좋았어요"
OTHER = "사용자는 주말마다 배드민턴을 친다"


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The app with a study and an organiser, serving on a free port; its Gradio cache and backups in tmp_path."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    study = study_from_dict({**PLAN, "sessions": 3, "min_gap_hours": 0})
    url, app, bot, worker = serve(
        tmp_path / "data" / "keem.db",
        study=study,
        admin_password="organiser-pw",
        strategy="balanced",
        backup_dir=str(tmp_path / "bucket"),
    )
    yield url, app, bot, worker
    worker.stop()
    app.close()


def lived(app: Any, bot: Any, worker: Any) -> tuple[Any, Any]:
    """A participant who agreed, said a phone number and a place, answered the questionnaire in free text, and
    deleted one memory sentence; a backup holds all of it."""
    sui, ui = app.keem_study.ui, app.keem_ui
    person = sui.agree(enter(sui, NAME)[0], True).person
    state = chat_state(sui, person)
    for text in (TOLD, PLACE_TURN, "오늘은 좀 피곤하네"):
        say(ui, text, state)
    ui.chat.end_session(state)
    wait_job(ui, state)  # the session's update commits its version first
    sui.after_end(state, person)
    sui.submit(person, 4, 5, 3, 4, COMMENT)
    assert records(bot.store).answers(user_id=state.user_id)
    phone = f"사용자의 전화번호는 {PHONE}이다"
    bot.engine.commit(
        state.user_id,
        [Sentence(phone), Sentence(PLACE), Sentence(DELETED), Sentence(OTHER)],
        base=latest.number if (latest := bot.engine.current(state.user_id)) else None,
        strategy="keem",
        status="ok",
        author="updater",
    )
    latest = bot.engine.current(state.user_id)
    ui.memory.delete_sentence(f"{latest.number}:2", state)  # DELETED now lives only in the earlier version
    assert worker.backup(force=True)
    return state, ui


def download(url: str, app: Any) -> bytes:
    """The organiser unlocks the view and downloads the export zip, as the page does; returns its bytes."""
    from chatbot.trials.web import ORGANISER_GUESSES

    organiser = uuid.uuid4().hex
    while not ORGANISER_GUESSES.ready():  # one password a second per process: an organiser waits that long too
        time.sleep(0.1)
    call(url, dep_index(app, "unlock"), ["organiser-pw", None], organiser)
    messages = call(url, dep_index(app, "download"), [None], organiser)
    done = next(m for m in messages if m.get("msg") == "process_completed")
    assert done["success"], done
    file = done["output"]["data"][0]
    data = httpx.get(file["url"], timeout=30).content
    assert data[:2] == b"PK"
    return data


def wait_clean(folders: list[Path], *texts: str) -> list[str]:
    """Leftovers of `texts` once the worker's after-forget backup has run (it ticks every 0.05 s)."""
    deadline = time.monotonic() + 10
    while True:
        found = [f for folder in folders for f in leftovers(folder, *texts)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_forgetting_a_participant_leaves_none_of_their_strings_in_any_file(running: Any, tmp_path: Path) -> None:
    url, app, bot, worker = running
    state, ui = lived(app, bot, worker)
    zipped = download(url, app)
    folders = [tmp_path / "data", tmp_path / "bucket", tmp_path / "gradio"]
    strings = (NAME, PHONE, TOLD, PLACE, PLACE_TURN, DELETED, COMMENT)
    assert set(wait_clean(folders[:2], *strings)) >= {f"{s} in keem.db-wal" for s in (NAME, PHONE, DELETED, COMMENT)}
    [archive] = Exports().zips()  # one known folder, inside Gradio's cache: the only copy on the server
    with zipfile.ZipFile(archive) as z:
        assert COMMENT in "".join(z.read(n).decode() for n in z.namelist())  # not personal data: not scrubbed
    assert archive.read_bytes() == zipped

    ui.memory.forget(NAME, state)

    assert wait_clean(folders, *strings) == []
    assert Exports().zips() == [] and not list((tmp_path / "gradio").rglob("*.zip"))
    assert (tmp_path / "data" / "keem.db-wal").stat().st_size == 0
    [audit] = bot.store.erasure.audit()
    assert audit["kind"] == "user" and audit["details"]["turns"] == 6 and audit["details"]["other"] >= 2
    worker.stop()  # a clean shutdown leaves nothing either
    assert wait_clean(folders, *strings) == []


def test_erasing_one_sentence_leaves_none_of_it_or_its_turn_and_keeps_the_rest(running: Any, tmp_path: Path) -> None:
    url, app, bot, worker = running
    state, ui = lived(app, bot, worker)
    download(url, app)
    latest = bot.engine.current(state.user_id)
    assert latest.texts[1] == PLACE
    with refused("확인란"):
        ui.memory.erase_sentence(f"{latest.number}:1", False, state)
    out = ui.memory.erase_sentence(f"{latest.number}:1", True, state)
    assert "망원동" not in out.memory.text and "삭제됨" in out.changelog + out.history

    folders = [tmp_path / "data", tmp_path / "bucket", tmp_path / "gradio"]
    assert wait_clean(folders, PLACE, PLACE_TURN, "망원동") == []
    assert Exports().zips() == []
    assert bot.engine.current(state.user_id).texts == [f"사용자의 전화번호는 {PHONE}이다", OTHER]
    hits = {h.text for h in bot.engine.search(state.user_id, "빵집 어디 단골이었지?", k=5)}
    assert hits == {f"사용자의 전화번호는 {PHONE}이다", OTHER}  # the index was rebuilt without it
    turns = [t["text"] for t in bot.store.turns.of_session(state.session.session_id)]
    assert turns[0] == TOLD and turns[2] == MARKER and turns.count(MARKER) >= 1 and "오늘은 좀 피곤하네" in turns
    assert [f for f in leftovers(tmp_path / "data", PHONE, COMMENT, NAME)]  # the rest of the user is still there
    [audit] = bot.store.erasure.audit(state.user_id)
    assert audit["kind"] == "sentence" and PLACE not in str(audit)
    with zipfile.ZipFile(io.BytesIO(download(url, app))) as z:  # the trial export shows the redaction
        exported = "".join(z.read(n).decode() for n in z.namelist())
    assert MARKER in exported and "망원동" not in exported and COMMENT in exported
