"""Forgetting forgets: after "나를 잊기" or "완전히 지우기" no byte of the erased text is left in the
database file, its WAL or its -shm, also while another connection reads; the rest of the memory stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memory.store import MARKER, Sentence, Store, note
from models.errors import InputError
from tests.erasure_world import EARLIER, ECHO, KEPT, KEPT_TURN, PHONE, SAID, SECRET, leftovers, lived

ROOT = Path(__file__).resolve().parent.parent  # subprocesses run this worktree's code


def test_a_sentence_erased_leaves_no_byte_of_it_or_its_turns_and_the_rest_stays(tmp_path):
    store, engine, uid = lived(tmp_path)
    assert leftovers(tmp_path / "data", PHONE)  # the search finds what is there
    erased = engine.forget_sentence(uid, SECRET)
    assert erased.counts == {"memory_sentences": 3, "memory_versions": 3, "turns": 2}
    assert leftovers(tmp_path / "data", PHONE, SECRET, EARLIER, SAID, ECHO) == []
    assert (tmp_path / "data" / "keem.db-wal").stat().st_size == 0
    versions = store.versions.of_user(uid)
    assert [v.texts for v in versions] == [[], [], [KEPT]]  # the versions stay, minus the sentence
    assert all(note("erased") in v.notes for v in versions)  # history shows the redaction
    turns = [t["text"] for t in store.rows("select text from turns order by id")]
    assert turns == [MARKER, MARKER, "오늘 날씨가 좋네", KEPT_TURN, "고양이 이야기 좋아요", "오늘 날씨가 좋네"]
    assert [h.text for h in engine.search(uid, "전화번호가 뭐였지?", k=5)] == [KEPT]
    [audit] = store.erasure.audit(uid)
    assert (audit["kind"], audit["rows"], audit["details"]["turns"]) == ("sentence", 8, 2)
    assert PHONE not in str(audit)


def test_the_only_sentence_or_an_unknown_one_is_refused_and_nothing_changes(tmp_path):
    store, engine, uid = lived(tmp_path)
    with pytest.raises(InputError) as unknown:
        engine.forget_sentence(uid, "사용자는 없는 문장이다")
    assert unknown.value.code == "erase_unknown_sentence"
    engine.commit(
        uid, [Sentence(SECRET, "user")], base=engine.current(uid).number, strategy="user", status="ok", author="user"
    )
    with pytest.raises(InputError) as last:
        engine.forget_sentence(uid, SECRET)
    assert last.value.code == "erase_last_sentence"
    assert store.versions.latest(uid).texts == [SECRET] and store.erasure.audit() == []


def test_no_erasure_while_an_update_that_read_the_turns_runs_and_one_after_it_ends(tmp_path):
    store, engine, uid = lived(tmp_path)
    session = store.sessions.of_user(uid)[0]["id"]
    job = store.queue.enqueue(uid, session, "keem")
    other = Store(tmp_path / "data" / "keem.db")  # the app's worker, in another connection, runs the update
    assert other.queue.claim(job)["status"] == "running"
    with pytest.raises(InputError) as running:
        engine.forget_sentence(uid, SECRET)
    assert running.value.code == "erase_update_running"
    assert SECRET in store.versions.latest(uid).texts and store.erasure.audit() == []
    other.queue.finish_without_version(job, "ok")
    assert engine.forget_sentence(uid, SECRET).kind == "sentence"


def test_forgetting_a_user_while_another_connection_reads_still_empties_the_wal(tmp_path):
    store, engine, uid = lived(tmp_path)
    other = Store(tmp_path / "data" / "keem.db")  # the CLI beside the app: a second connection to the file
    reading = threading.Event()

    def reader() -> None:
        with other.lock:
            other.db.conn.execute("BEGIN")
            other.db.conn.execute("select count(*) from turns").fetchone()
            reading.set()
            time.sleep(0.5)  # holds its read snapshot (the WAL's frames) while the forget commits
            other.db.conn.commit()

    thread = threading.Thread(target=reader)
    thread.start()
    reading.wait()
    erased = engine.forget(uid)
    thread.join()
    assert erased.kind == "user" and erased.counts["turns"] == 6 and erased.counts["memory_versions"] == 3
    assert (tmp_path / "data" / "keem.db-wal").stat().st_size == 0
    assert leftovers(tmp_path / "data", PHONE, SAID, KEPT, KEPT_TURN, "minsu") == []
    assert store.users.find("minsu") is None and other.users.find("minsu") is None
    [audit] = other.erasure.audit()
    assert audit["kind"] == "user" and audit["rows"] >= 14
    other.close()
    store.close()
    assert leftovers(tmp_path / "data", PHONE, KEPT, "minsu") == []


def test_keem_memory_forget_sentence_by_number_from_another_process_while_the_app_holds_the_file(tmp_path):
    store, _, uid = lived(tmp_path)  # the app's connection stays open meanwhile
    db = str(tmp_path / "data" / "keem.db")
    env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}
    exports = tmp_path / "gradio" / "keem-exports" / "zip-x"
    exports.mkdir(parents=True)
    (exports / "keem-export-study.zip").write_bytes(PHONE.encode())  # an earlier export holding the text
    keem = [sys.executable, "-m", "chatbot.cli.main", "memory", "forget", "--db", db, "--user", "minsu", "--yes"]
    refused = subprocess.run([*keem, "--sentence", "3"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert refused.returncode == 2 and "has 2 sentences" in refused.stderr and "Traceback" not in refused.stderr
    done = subprocess.run([*keem, "--sentence", "1", "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == {"memory_sentences": 3, "memory_versions": 3, "turns": 2}
    assert leftovers(tmp_path, PHONE, SECRET, SAID) == []
    assert store.versions.latest(uid).texts == [KEPT]
    history = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", "memory", "history", "--db", db, "--user", "minsu"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert MARKER in history.stdout and PHONE not in history.stdout


def test_an_erased_sentence_leaves_no_copy_in_the_notes_parameters_and_the_page_says_so(tmp_path):
    """A note's parameters may quote the memory (a verifier's problem, a note kept as text from before codes): the
    erasure scrubs them like every other copy, and the page says the version had something erased."""
    from chatbot.web.history import version_reasons
    from chatbot.web.messages import LABELS
    from memory.store.notes import strings

    store, engine, uid = lived(tmp_path)
    latest = store.versions.latest(uid)
    problem = f"실패: '{SECRET}'는 대화에 없다"
    engine.commit(
        uid,
        [*latest.sentences, Sentence("사용자는 수영을 배운다")],
        base=latest.number,
        strategy="keem",
        status="fallback",
        author="updater",
        notes=[note("not_verified", attempts=2, problem=problem, problems=[f"verify: {PHONE}?"])],
    )
    latest = store.versions.latest(uid)
    engine.commit(
        uid,
        [*latest.sentences, Sentence("사용자는 요가를 한다", "user")],
        base=latest.number,
        strategy="user",
        status="ok",
        author="user",
        notes=[note("text", text=f"메모: {SAID}")],
    )
    engine.forget_sentence(uid, SECRET)
    assert leftovers(tmp_path / "data", PHONE, SECRET, SAID) == []
    versions = store.versions.of_user(uid)
    assert all(PHONE not in s for v in versions for s in strings(v.notes))
    fallback, edited = versions[-2:]
    assert fallback.notes[0].code == "not_verified" and MARKER in fallback.notes[0].params["problem"]
    assert note("erased") in fallback.notes
    assert LABELS["erased"] in version_reasons(fallback)
    assert version_reasons(edited) == [f"{MARKER} · {MARKER} 사용자가 지운 문장"]  # the whole line stated it
