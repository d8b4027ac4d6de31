"""`keem serve --write-only`: the HAProxy and supervisord configs it writes, checked by HAProxy itself; settings and
secrets reach the processes through the environment, never the files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from chatbot.cli.main import main
from chatbot.cli.serve import setting_env
from chatbot.settings import Settings
from memory.store import Store

needs_haproxy = pytest.mark.skipif(not shutil.which("haproxy"), reason="apt-get install haproxy")


@needs_haproxy
def test_write_only_writes_a_config_haproxy_accepts_with_cookie_stickiness_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEM_DB", "postgresql://keem:s3cret-pw@db.example:5432/keem")
    monkeypatch.setenv("KEEM_AUTH", "minsu:pw-of-minsu")
    run = tmp_path / "run"
    assert (
        main(["serve", "--processes", "3", "--workers", "2", "--port", "9000", "--run-dir", str(run), "--write-only"])
        == 0
    )
    haproxy, supervisord = (run / "haproxy.cfg").read_text(), (run / "supervisord.conf").read_text()
    assert subprocess.run(["haproxy", "-c", "-q", "-f", str(run / "haproxy.cfg")]).returncode == 0
    assert "cookie keem_proc insert indirect nocache" in haproxy and "balance source" not in haproxy
    assert "timeout server 1h" in haproxy and "bind 127.0.0.1:9000" in haproxy
    api = haproxy.partition("\nbackend api\n")[2]  # API clients keep no cookie: a hash of whom the request acts for
    assert "use_backend api if { path_beg /v1/ } || { path /mcp }" in haproxy  # the API and its MCP endpoint
    assert "balance hash" in api and "cookie" not in api
    for i, port in enumerate((9001, 9002, 9003), 1):
        assert f"server app{i} 127.0.0.1:{port} cookie app{i}" in haproxy
        assert f"server app{i} 127.0.0.1:{port} check inter 2s weight 256" in api  # an even hash ring
        assert f"[program:app{i}]" in supervisord and f"--port {port}" in supervisord
    assert "[program:worker2]" in supervisord and "[program:worker3]" not in supervisord
    assert supervisord.count('KEEM_WORKER="off"') == 3 and "[program:haproxy]" in supervisord
    for text in (haproxy, supervisord):
        assert "s3cret" not in text and "pw-of-minsu" not in text


def test_flags_reach_the_processes_as_keem_variables() -> None:
    env = setting_env(Settings(db="/srv/keem.db", model="openai:eeve", memory_cues=True, worker="off", port=9000))
    assert env == {
        "KEEM_DB": "/srv/keem.db",
        "KEEM_MODEL": "openai:eeve",
        "KEEM_MEMORY_CUES": "1",
        "KEEM_WORKER": "off",
    }


def test_no_worker_is_one_line_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workers", "0", "--run-dir", str(tmp_path / "run"), "--write-only"]) == 2
    assert "--workers need 1 or more" in capsys.readouterr().err


@needs_haproxy
def test_a_store_a_newer_keem_migrated_stops_serve_before_any_program_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "keem.db"
    store = Store(db)
    with store.write():
        store.insert("_sqlite_migrations", {"migration_set": "keem", "name": "m999_future", "applied_at": "x"})
    store.close()

    def never(*args: object) -> None:  # a safety net: were the store not refused, this test must not become supervisord
        raise AssertionError("keem serve went on to start supervisord")

    monkeypatch.setattr(os, "execv", never)
    assert main(["serve", "--db", str(db), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "written by a newer keem" in err and "upgrade keem-chat on this machine" in err
