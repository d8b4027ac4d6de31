"""The CLI against one Postgres database from several processes at once: each user's memory gets every process's
sentences (no lost update) and none of the other user's (isolation); after `keem memory forget` a pg_dump of the
database holds none of the forgotten user's words. Bad --db values end in one line and exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memory.store import Store

KEEM = [sys.executable, "-m", "chatbot.cli.main"]


def keem(*args: str, db: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "KEEM_DB": db, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen([*KEEM, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_four_cli_processes_edit_two_memories_and_a_forget_leaves_nothing_in_a_dump(pg_url, tmp_path):
    dump = shutil.which("pg_dump")
    if dump is None:
        pytest.skip("pg_dump is not installed (apt-get install postgresql-client)")
    words = {"alice": ["토마토", "자전거", "바이올린", "등산화"], "bob": ["수영장", "피아노", "고양이", "우주선"]}
    files = []
    for n in range(4):
        user = "alice" if n % 2 == 0 else "bob"
        path = tmp_path / f"p{n}.txt"
        mine = words[user][n // 2 * 2 : n // 2 * 2 + 2]
        path.write_text("".join(f"사용자는 {w}을 좋아한다 ({n}-{i})\n" for i, w in enumerate(mine)), encoding="utf-8")
        files.append((user, path))
    running = [
        keem("memory", "import", "--user", user, "--embedder", "ngram", str(path), db=pg_url, cwd=tmp_path)
        for user, path in files
    ]
    results = [finished(p) for p in running]
    assert [r[0] for r in results] == [0] * 4, [r[2][-400:] for r in results]
    store = Store(pg_url)
    try:
        for user, other in (("alice", "bob"), ("bob", "alice")):
            texts = " ".join(store.versions.latest(store.users.require(user)).texts)
            assert all(w in texts for w in words[user]), texts  # both processes' sentences: no lost update
            assert not any(w in texts for w in words[other])  # isolation
            assert len(store.versions.of_user(store.users.require(user))) == 2  # one version per import
    finally:
        store.close()
    code, _, err = finished(keem("memory", "forget", "--user", "alice", "--yes", db=pg_url, cwd=tmp_path))
    assert code == 0, err
    dumped = subprocess.run([dump, "--dbname", pg_url], capture_output=True, text=True, timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    assert not any(w in dumped.stdout for w in words["alice"]) and "alice" not in dumped.stdout
    assert all(w in dumped.stdout for w in words["bob"])
    assert sorted(tmp_path.iterdir()) == sorted(p for _, p in files)  # nothing made from the URL


def test_a_bad_db_url_is_one_line_and_exit_2(tmp_path):
    cases = {
        "mysql://root:hunter2@localhost/keem": "mysql://",
        "postgresql://keem:hunter2@127.0.0.1:1/keem": "cannot reach the Postgres database",
    }
    running = {db: keem("memory", "users", db=db, cwd=tmp_path) for db in cases}  # both at once: half the wait
    for db, says in cases.items():
        code, out, err = finished(running[db])
        assert code == 2 and says in err and "hunter2" not in err + out, err
        assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # no folder made from the URL
