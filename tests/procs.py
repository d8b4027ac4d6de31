"""Real processes for the tests of several processes on one store: `keem worker`s, `keem serve` (app processes,
workers and HAProxy under supervisord), a loopback model that does every update stage's job.

The store's location comes from the `shared_db` fixture (tests/conftest.py): Postgres under `make test` (and on
CI), a SQLite file elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory.store import Store
from models.fake import section, stage_of

ROOT = Path(__file__).resolve().parents[1]


needs_serve = pytest.mark.skipif(
    not (shutil.which("haproxy") or os.path.exists("/usr/sbin/haproxy")) or not shutil.which("supervisord"),
    reason="keem serve needs HAProxy and supervisord: apt-get install haproxy supervisor (make serve-tools)",
)


def model_reply(body: dict[str, Any]) -> str:
    """Summaries state what the user said, updates keep every old sentence and add the new ones, checks pass, chat
    echoes the user's last message."""
    prompt = str(body["messages"][-1]["content"])
    stage = stage_of(prompt) or "chat"
    if stage == "summarize":
        lines = prompt.rsplit("\n대화 (", 1)[-1].splitlines()
        said = [line[4:].strip() for line in lines if line.startswith("사용자:")]
        return "\n".join(f"사용자는 '{u[:60]}'라고 말했다." for u in said) or "사용자는 인사했다."
    if stage == "reflect":
        return "\n".join(section(prompt, "\n요약:\n", "\n답:"))
    if stage == "update":
        old, new = section(prompt, "\n이전 기억:\n", "\n이번 요약:"), section(prompt, "\n이번 요약:\n", "\n새 기억:")
        return "\n".join(dict.fromkeys(old + new))
    if stage in ("verify", "guard", "operations", "cues"):
        return {"verify": "통과", "guard": "아니오", "operations": "APPEND", "cues": ""}[stage]
    last = next((str(m["content"]) for m in reversed(body["messages"]) if m["role"] == "user"), "")
    return f"네, 잘 들었어요: {last[:60]}"


def env_for(model_url: str, **extra: str) -> dict[str, str]:
    """This environment without KEEM_*/OPENAI_*/Space variables, with the loopback model and `extra`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KEEM_", "OPENAI_", "SPACE", "OAUTH_"))}
    return {
        **clean,
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "k",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def python(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE, text=True)


def hold_write_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process inside BEGIN IMMEDIATE on `path` for `seconds` (a long write, the sqlite3 shell in BEGIN)."""
    holder = python(HOLDER, path, seconds)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def start_worker(db: str, model_url: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """`keem worker` on `db` with the loopback model (openai:fake) and the n-gram embedder; its output goes to `log`."""
    return subprocess.Popen(
        [sys.executable, "-m", "chatbot.cli.main", "worker", "--db", db, "--model", "openai:fake"]
        + ["--embedder", "ngram"],
        cwd=ROOT,
        env=env_for(model_url, **env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll `check` until it returns something true; that value, or AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def ended_session(store: Store, name: str, said: list[str], strategy: str = "keem") -> int:
    """A user (created if needed) with one session in which they said `said`, ended; returns its update job's id."""
    user_id = store.users.get_or_create(name)
    session_id = store.sessions.start(user_id, strategy, "openai:fake")
    for text in said:
        turn = store.turns.add(session_id, user_id, "user", text)
        store.turns.add(session_id, user_id, "assistant", "네, 그렇군요.", reply_to=turn)
    store.sessions.end(session_id)
    return store.queue.enqueue(user_id, session_id, strategy)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM (after a SIGCONT, in case it was stopped), then wait; SIGKILL if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def free_block(n: int) -> int:
    """The first of `n` consecutive free ports on 127.0.0.1 (HAProxy's, then one per app process), drawn below the
    kernel's ephemeral range: a port inside it that is free now can be taken by any outgoing connection (the tests'
    Postgres clients, HTTP clients) before the app binds it."""
    import random
    import socket

    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    for _ in range(200):
        base = random.randrange(20000, max(20001, low - n))
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no {n} consecutive free ports below {low}")


@contextmanager
def serve(
    tmp_path: Path, db: str, model_url: str, processes: int, workers: int, *args: str, **env: str
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """`keem serve --processes N --workers M` (app processes, workers, HAProxy under supervisord) on a free port;
    yields HAProxy's URL once every app answers through it, the run folder and supervisord's process."""
    port = free_block(processes + 1)
    run = tmp_path / "run"
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "chatbot.cli.main", "serve", "--processes", str(processes), "--workers", str(workers)]
        + ["--port", str(port), "--run-dir", str(run), "--db", db, "--model", "openai:fake", "--embedder", "ngram"]
        + list(args),
        cwd=ROOT,
        env=env_for(model_url, **env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:

        def all_up() -> bool:
            assert proc.poll() is None, log.read_text() + _logs(run)
            for i in range(1, processes + 1):
                try:
                    if httpx.get(url + "config", cookies={"keem_proc": f"app{i}"}, timeout=2).status_code != 200:
                        return False
                except httpx.HTTPError:
                    return False
            return True

        try:
            wait_for(all_up, 120, "every app process answering through HAProxy", every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()}{_logs(run)}") from None
        yield url, run, proc
    finally:
        stop(proc, 60)


def _logs(run: Path) -> str:
    return "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((run / "logs").glob("*.log")))
