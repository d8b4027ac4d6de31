"""Per-user caches across processes: what another process (the CLI, another app process) commits or forgets is
what this process serves at its next read; a live session of a user forgotten elsewhere stores nothing more."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from memory.backup import open_store
from memory.engine import MemoryEngine
from memory.store import Sentence
from models.embedders import NgramEmbedder
from models.errors import UserForgottenError
from models.fake import ScriptedChatModel
from tests.procs import ROOT, env_for, wait_for

pytestmark = pytest.mark.slow  # two real `keem` processes


def keem(db: str, *args: str, **env: str) -> str:
    """Run `keem ... --db DB` in its own process (with `env` besides); its output, or AssertionError with it."""
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", *args, "--db", db],
        cwd=ROOT,
        env=env_for("http://127.0.0.1:9/v1", **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_another_process_s_commit_and_forget_are_what_this_process_serves_next(tmp_path: Path, shared_db: str) -> None:
    db = shared_db
    prompts: list[str] = []  # each reply's system prompt: the memory the live session holds
    model = ScriptedChatModel(responder=lambda m: prompts.append(str(m[0]["content"])) or "응")
    bot = Chatbot(Settings(db=db), chat_model=model, embedder=NgramEmbedder())
    engine: MemoryEngine = bot.engine
    user_id = bot.store.users.get_or_create("minsu")
    engine.commit(user_id, [Sentence("서울에 산다.")], base=None, strategy="import", status="ok", author="import")
    assert [h.text for h in engine.search(user_id, "고양이", k=5)] == ["서울에 산다."]  # cached here now
    session = bot.open_session(user_id, "minsu", "keem")
    list(session.send("안녕"))
    assert "서울에 산다." in prompts[-1] and "고양이" not in prompts[-1]

    (tmp_path / "more.txt").write_text("고양이 두 마리를 키운다.\n", encoding="utf-8")
    keem(db, "memory", "import", "--user", "minsu", "--embedder", "ngram", str(tmp_path / "more.txt"))
    assert "고양이 두 마리를 키운다." in [h.text for h in engine.search(user_id, "고양이", k=5)]  # never the stale one
    list(session.send("고양이 이야기 할게"))
    assert "고양이 두 마리를 키운다." in prompts[-1]  # the live session's memory follows the new version

    keem(db, "memory", "forget", "--user", "minsu", "--yes")
    assert engine.search(user_id, "고양이", k=5) == []
    assert user_id not in engine.index.cached_users()  # the forgotten text left this process's memory
    with pytest.raises(UserForgottenError):
        list(session.send("나 이사했어"))  # the page turns this into the notice a forgotten user's tab gets
    assert open_store(db).rows("select id from turns") == []


def listeners(pg_url: str) -> int:
    """Sessions of the database whose last statement was a LISTEN: the workers waiting for a forget's NOTIFY."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        found = conn.execute(
            "select count(*) from pg_stat_activity where datname = current_database() and query ilike 'listen %'"
        ).fetchone()
        return int(found[0]) if found else 0


def test_on_postgres_a_forget_in_another_process_leaves_this_one_s_memory_at_once(tmp_path: Path, pg_url: str) -> None:
    """Without any read here, and with a tick far away, the forget's NOTIFY wakes this process's worker, which
    drops the user's cached index and live session: the forgotten text leaves every process within moments."""
    import time

    from chatbot.worker import Worker

    bot = Chatbot(Settings(db=pg_url), chat_model=ScriptedChatModel(responder=lambda m: "응"), embedder=NgramEmbedder())
    user_id = bot.store.users.get_or_create("minsu")
    bot.engine.commit(user_id, [Sentence("서울에 산다.")], base=None, strategy="import", status="ok", author="import")
    bot.engine.search(user_id, "서울", k=5)
    session = bot.open_session(user_id, "minsu", "keem")
    before = listeners(pg_url)
    worker = Worker(bot, poll_s=60.0, run_jobs=False).start()  # its next tick is a minute away
    try:
        worker.track(session)
        # the listener listens (a fixed 1.5-s wait was too short on a loaded machine)
        wait_for(lambda: listeners(pg_url) > before, 15, "the worker's LISTEN", every=0.05)
        assert user_id in bot.engine.index.cached_users()
        keem(pg_url, "memory", "forget", "--user", "minsu", "--yes")
        deadline = time.monotonic() + 5.0
        while user_id in bot.engine.index.cached_users() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert user_id not in bot.engine.index.cached_users()
        assert session.session_id not in worker.watching()
    finally:
        worker.stop(end_open=False)


def test_a_forget_from_a_shell_with_another_environment_removes_the_app_s_export_zips(
    tmp_path: Path, shared_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The organiser's export zips live in the app's Gradio cache; `keem memory forget` run from a shell whose
    GRADIO_TEMP_DIR differs cannot see them, so the app process removes its own as soon as it learns of the
    forget (its worker's tick, or at once on Postgres): the erasure does not depend on an environment variable."""
    import time

    from chatbot.exports import Exports
    from chatbot.worker import Worker

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "app-cache"))
    bot = Chatbot(
        Settings(db=shared_db), chat_model=ScriptedChatModel(responder=lambda m: "응"), embedder=NgramEmbedder()
    )
    bot.store.users.get_or_create("minsu")
    archive, _ = Exports().make(lambda folder: (folder.mkdir(), (folder / "a.txt").write_text("minsu")), "study")
    worker = Worker(bot, poll_s=0.2, run_jobs=False).start()
    try:
        time.sleep(0.5)
        assert archive.exists()
        keem(shared_db, "memory", "forget", "--user", "minsu", "--yes", GRADIO_TEMP_DIR=str(tmp_path / "shell-cache"))
        deadline = time.monotonic() + 5.0
        while archive.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not archive.exists()
    finally:
        worker.stop(end_open=False)
