"""Real processes for the tests of several processes on one store: `keem worker`s, `keem serve` (app processes,
workers and HAProxy under supervisord), a loopback model that does every update stage's job.

The store's location comes from `store_location` only: a SQLite file in the test's folder, or the database
KEEM_TEST_DB names (a `postgresql://` URL of a throwaway database), so the same tests run on either store.
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


def store_location(tmp_path: Path) -> str:
    """Where the processes of one test keep their store (KEEM_TEST_DB, else a SQLite file under `tmp_path`)."""
    return os.environ.get("KEEM_TEST_DB") or str(tmp_path / "keem.db")


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


@contextmanager
def serve(
    tmp_path: Path, db: str, model_url: str, processes: int, workers: int, *args: str, **env: str
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """`keem serve --processes N --workers M` (app processes, workers, HAProxy under supervisord) on a free port;
    yields HAProxy's URL once every app answers through it, the run folder and supervisord's process."""
    from tests.test_ui import free_port

    port = free_port()
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
