"""Database snapshots for hosts whose local disk is not kept (a Space): written whole, restored at start,
and purged of a forgotten user."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chatbot.bot import Chatbot
from chatbot.cli.main import main
from chatbot.settings import Settings
from chatbot.worker import Worker
from memory.backup import KEEP, Backups, open_store
from memory.engine import MemoryEngine
from memory.store import Sentence, Store
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel

SECRET = "사용자는 비밀 일기장에 첫사랑 이야기를 적는다"


def _memory(store: Store, name: str, text: str) -> int:
    uid = store.users.get_or_create(name)
    MemoryEngine(store, NgramEmbedder()).commit(
        uid, [Sentence(text)], base=None, strategy="import", status="ok", author="import"
    )
    return uid


def _bot(tmp_path, **settings) -> Chatbot:
    return Chatbot(
        Settings(db=str(tmp_path / "live" / "keem.db"), backup_dir=str(tmp_path / "bucket"), **settings),
        chat_model=ScriptedChatModel(responder=lambda m: "응"),
        embedder=NgramEmbedder(),
    )


def test_a_snapshot_is_a_whole_database_and_only_the_newest_are_kept(tmp_path):
    store = Store(tmp_path / "odd #1?name" / "keem.db")  # URI characters in the path are escaped
    _memory(store, "minsu", SECRET)
    backups = Backups(tmp_path / "bucket")
    paths = [backups.snapshot(store) for _ in range(KEEP + 2)]
    assert backups.snapshots() == paths[-KEEP:]
    assert not list((tmp_path / "bucket").glob("*.part"))
    copy = Store(paths[-1])
    assert copy.versions.latest(copy.users.require("minsu")).texts == [SECRET]


def test_a_missing_database_is_restored_from_the_newest_sound_snapshot(store, tmp_path):
    _memory(store, "minsu", SECRET)
    backups = Backups(tmp_path / "bucket")
    good = backups.snapshot(store)
    damaged = backups.snapshot(store)
    damaged.write_bytes(b"not a database" * 100)
    target = tmp_path / "fresh" / "keem.db"
    assert backups.restore(target) == good
    restored = Store(target)
    assert restored.versions.latest(restored.users.require("minsu")).texts == [SECRET]
    assert backups.restore(target) is None  # an existing database is never overwritten


def test_the_app_restores_its_memory_after_the_container_lost_its_disk(tmp_path):
    bot = _bot(tmp_path)
    _memory(bot.store, "minsu", SECRET)
    worker = Worker(bot)
    worker.stop()  # shutdown writes a final snapshot
    bot.store.close()
    for path in (tmp_path / "live").iterdir():  # a new container: local files gone, the bucket kept
        path.unlink()
    again = _bot(tmp_path)
    assert again.store.versions.latest(again.store.users.require("minsu")).texts == [SECRET]


def _later(now: list[float], backups: Backups, seconds: float) -> None:
    """Time passes for the worker's clock and for the snapshots' files alike."""
    now[0] += seconds
    for path in backups.snapshots():
        stamp = path.stat().st_mtime - seconds
        os.utime(path, (stamp, stamp))


def test_snapshots_follow_changes_on_schedule_and_not_otherwise(tmp_path):
    now = [0.0]
    bot = _bot(tmp_path, backup_every_min=10)
    worker = Worker(bot, clock=lambda: now[0])
    backups = worker.backups
    assert worker.backup() and len(backups.snapshots()) == 1  # the first tick takes a baseline
    _later(now, backups, 3600)
    assert not worker.backup()  # nothing changed
    _memory(bot.store, "minsu", SECRET)
    assert worker.backup()  # changed, and the last one is an hour old
    _memory(bot.store, "jiwoo", SECRET)
    _later(now, backups, 60)
    assert not worker.backup()  # changed again, but at most one per 10 minutes
    _later(now, backups, 600)
    assert worker.backup() and len(backups.snapshots()) == 3


def test_processes_sharing_a_database_take_one_snapshot_per_interval(tmp_path):
    """`keem serve`: every app process and worker runs the backup tick on one database and one folder; the interval
    is the folder's, not each process's (four stores on one file stand for four processes; their snapshots run at
    once in threads)."""
    bot = _bot(tmp_path, backup_every_min=10)
    _memory(bot.store, "minsu", SECRET)
    stores = [Store(bot.settings.db) for _ in range(4)]
    backups = Backups(bot.settings.backup_dir)
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda s: backups.snapshot(s, unless_within_s=600), stores))
    assert sum(m is not None for m in made) == 1 and len(backups.snapshots()) == 1
    _later([0.0], backups, 601)
    assert backups.snapshot(stores[0], unless_within_s=600) is not None  # the next interval's
    for store in stores:
        store.close()


def _snapshot_until(db: str, folder: str, stop: str) -> int:
    """Another process's backups, back to back until the file `stop` appears (as a busy app's worker takes them)."""
    store, backups, made = Store(db), Backups(folder, keep=50), 0
    deadline = time.time() + 60
    while not Path(stop).exists() and time.time() < deadline:
        backups.snapshot(store)
        made += 1
        Path(f"{stop}.{os.getpid()}").touch()  # under way: the test forgets once all three are
    store.close()
    return made


def test_a_forget_leaves_no_snapshot_another_process_began_before_it(tmp_path):
    """Three other processes snapshot the database back to back while `keem memory forget` runs: once it returns, no
    file in the folder (snapshots, and the half-written ones the others have under way) holds the forgotten user.
    Without the lock, a snapshot begun before the forget's commit is renamed into place after the forget's cleanup."""
    bot = _bot(tmp_path)
    _memory(bot.store, "minsu", SECRET)
    # a database of a few MB (each snapshot takes some milliseconds), written straight into the store: only its
    # bytes matter here, and the engine's embedding and indexing of 400 memories cost six times as long
    for i in range(400):
        filler = Sentence(f"사용자 {i}는 " + "산책을 좋아한다 " * 260)
        user_id = bot.store.users.get_or_create(f"user{i}")
        bot.store.versions.commit(user_id, [filler], base=None, strategy="import", status="ok", author="import")
    folder, stop = bot.settings.backup_dir, str(tmp_path / "stop")
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        others = [pool.apply_async(_snapshot_until, (bot.settings.db, folder, stop)) for _ in range(3)]
        deadline = time.time() + 60
        while len(list(tmp_path.glob("stop.*"))) < 3 and time.time() < deadline:  # all three are snapshotting
            time.sleep(0.05)
        bot.engine.forget(bot.store.users.require("minsu"))
        Backups(folder).snapshot(bot.store, drop_older=True)  # what `keem memory forget` does after its commit
        left = [p.name for p in Path(folder).iterdir() if SECRET.encode() in p.read_bytes()]
        Path(stop).touch()
        made = [o.get(timeout=60) for o in others]
    assert all(made) and left == []


def test_forgetting_a_user_removes_them_from_every_snapshot_at_once(tmp_path):
    bot = _bot(tmp_path)
    worker = Worker(bot)
    _memory(bot.store, "minsu", SECRET)
    _memory(bot.store, "jiwoo", "사용자는 고양이를 키운다")
    assert worker.backup()
    killed = worker.backups.folder / ".keem-20260101T000000000000Z.db.part"  # a process killed mid-snapshot
    killed.write_bytes(SECRET.encode())
    bot.engine.forget(bot.store.users.require("minsu"))
    assert worker.backup()  # not waiting for the schedule
    assert not killed.exists()
    snapshots = worker.backups.snapshots()
    assert len(snapshots) == 1
    assert SECRET.encode() not in snapshots[0].read_bytes()  # secure_delete: not even in free pages
    kept = Store(snapshots[0])
    assert kept.versions.latest(kept.users.require("jiwoo")).texts == ["사용자는 고양이를 키운다"]


def test_cli_forget_replaces_the_snapshots_and_cli_reads_restore(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "live" / "keem.db"))
    monkeypatch.setenv("KEEM_BACKUP_DIR", str(tmp_path / "bucket"))
    store = open_store(str(tmp_path / "live" / "keem.db"))
    _memory(store, "minsu", SECRET)
    _memory(store, "jiwoo", "사용자는 고양이를 키운다")
    Backups(tmp_path / "bucket").snapshot(store)
    store.close()
    assert main(["memory", "forget", "--user", "minsu", "--yes"]) == 0
    snapshots = Backups(tmp_path / "bucket").snapshots()
    assert len(snapshots) == 1 and SECRET.encode() not in snapshots[0].read_bytes()
    for path in (tmp_path / "live").iterdir():
        path.unlink()
    capsys.readouterr()
    assert main(["memory", "show", "--user", "jiwoo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"][0]["text"] == "사용자는 고양이를 키운다"


def test_one_shot_commands_snapshot_what_they_wrote(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "live" / "keem.db"))
    monkeypatch.setenv("KEEM_BACKUP_DIR", str(tmp_path / "bucket"))
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    memory = tmp_path / "mem.txt"
    memory.write_text(SECRET + "\n", encoding="utf-8")
    assert main(["memory", "import", "--user", "minsu", str(memory)]) == 0
    snapshots = Backups(tmp_path / "bucket").snapshots()
    assert len(snapshots) == 1 and SECRET.encode() in snapshots[0].read_bytes()


def test_an_unwritable_backup_folder_says_how_to_fix_it(store, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception, match="KEEM_BACKUP_DIR"):
        Backups(blocker / "sub").snapshot(store)
    assert sqlite3.connect(store.path).execute("select count(*) from users").fetchone()[0] == 0
