"""Broken storage as users meet it: a folder or a stranger's file as --db, a read-only mount, a full disk, a closed
pipe. Each is one line that says how to fix it (exit 2), and nothing already stored is lost.

The mount tests use real tmpfs mounts (root, as on CI); elsewhere they skip.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from chatbot.cli.main import main
from tests.conftest import fill, tmpfs

KEEM = [sys.executable, "-m", "chatbot.cli.main"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


def test_a_folder_or_a_file_that_is_no_database_is_one_line_with_the_fix(tmp_path, capsys):
    stranger = tmp_path / "notes.db"
    stranger.write_text("my shopping list\n", encoding="utf-8")
    for argv in (["memory", "users"], ["memory", "show", "--user", "minsu"], ["jobs", "list"]):
        code, _, err = run(capsys, *argv, "--db", str(tmp_path))
        assert code == 2
        one_line_error(err, "is a folder", "--db")
        code, _, err = run(capsys, *argv, "--db", str(stranger))
        assert code == 2
        one_line_error(err, "is not a keem database", "--db")
    assert stranger.read_text(encoding="utf-8") == "my shopping list\n"  # untouched


def test_every_command_that_stores_ends_the_same_way_before_loading_a_model(tmp_path, capsys, monkeypatch):
    """The CLI's one handler: the store is opened before any model loads (an unreachable server would be another
    error), by `keem chat` too, whose models load in the background; the builder's --out the same."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    script, lines = tmp_path / "s.txt", tmp_path / "m.txt"
    script.write_text("안녕\n", encoding="utf-8")
    lines.write_text("사용자는 부산에 산다\n", encoding="utf-8")
    model = ["--model", "openai:x", "--embedder", "ngram"]
    for argv in (
        ["session", "--user", "minsu", "--script", str(script), *model],
        ["chat", "--port", "7989", *model],
        ["jobs", "retry", *model],
        ["memory", "import", "--user", "minsu", str(lines), "--embedder", "ngram"],
        ["trial", "export", "--out", str(tmp_path / "export")],
    ):
        code, _, err = run(capsys, *argv, "--db", str(tmp_path))
        assert code == 2, argv
        one_line_error(err, "is a folder", "--db")
    out = tmp_path / "ds"
    (out / "calls.sqlite").mkdir(parents=True)
    fixture = Path(__file__).parents[1] / "evaluation" / "fixtures" / "carecall.json"
    code, _, err = run(capsys, "build-dataset", str(fixture), "--out", str(out), "--model", "openai:x", "--no-progress")
    assert code == 2
    one_line_error(err, "calls.sqlite is a folder", "--out")


def test_a_read_only_mount_and_a_full_disk_say_so_and_lose_nothing(tmp_path, capsys):
    sentences = tmp_path / "mem.txt"
    sentences.write_text("사용자는 고양이 두 마리를 키운다.\n", encoding="utf-8")
    many = tmp_path / "many.txt"
    many.write_text(
        "".join(f"사용자는 {i}번째로 아주 긴 이야기를 여러 번 좋아한다고 말했다.\n" for i in range(3000)),
        encoding="utf-8",
    )
    with tmpfs(tmp_path / "disk", "1m") as disk:  # the migrations fill the WAL before their first checkpoint
        db = str(disk / "keem.db")
        assert (
            run(capsys, "memory", "import", "--user", "minsu", "--db", db, "--embedder", "ngram", str(sentences))[0]
            == 0
        )
        fill(disk)
        code, _, err = run(capsys, "memory", "import", "--user", "minsu", "--db", db, "--embedder", "ngram", str(many))
        assert code == 2
        one_line_error(err, "disk", "is full", "nothing already stored is lost")
        (disk / "filler").unlink()
        code, out, _ = run(capsys, "memory", "show", "--user", "minsu", "--db", db, "--json")
        assert code == 0 and '"version": 1' in out and "고양이 두 마리" in out
        gc.collect()  # the in-process commands' connections, so the mount can turn read-only
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        code, _, err = run(
            capsys, "memory", "import", "--user", "minsu", "--db", db, "--embedder", "ngram", str(sentences)
        )
        assert code == 2  # writing is refused with the cause; what SQLite can still read stays readable
        one_line_error(err, "cannot be written", "--db")


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    from memory.store import Store

    db = tmp_path / "keem.db"
    store = Store(db)
    for i in range(3000):
        store.users.get_or_create(f"user{i:04d}")
    store.close()
    env = {**os.environ, "KEEM_DB": str(db), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        f"{' '.join(KEEM)} memory users | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.stdout.startswith("user0000") and done.stderr == "", done.stderr


def test_storage_errors_are_told_apart_by_sqlite_result_code_not_only_by_wording(tmp_path):
    """SQLite's messages vary by version and build; its result codes do not. Each code gets its own fix, and an
    extended code (SQLITE_READONLY_DBMOVED) counts as its primary one."""
    import sqlite3

    from memory.store.connection import storage_error

    def error(code: int) -> sqlite3.Error:
        exc = sqlite3.OperationalError("disk I/O trouble")  # the same words for each: only the code differs
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
        return exc

    db = str(tmp_path / "keem.db")
    assert storage_error(db, error(sqlite3.SQLITE_FULL)).code == "storage_full"
    assert storage_error(db, error(sqlite3.SQLITE_READONLY | (4 << 8))).code == "storage_read_only"
    assert storage_error(db, error(sqlite3.SQLITE_NOTADB)).code == "storage_not_sqlite"
    assert storage_error(db, error(sqlite3.SQLITE_CORRUPT)).code == "storage_not_sqlite"
    assert storage_error(db, error(sqlite3.SQLITE_IOERR)).code == "storage_other"
    assert storage_error(db, sqlite3.OperationalError("database or disk is full")).code == "storage_full"  # 3.10
