"""What the HTTP API's test modules share: the app with its API served on a free port, a user's token, a client
that presents it, ending a conversation and waiting for its update, an error's code."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from chatbot.bot import Chatbot
from chatbot.web.app import build_app
from chatbot.worker import Worker
from tests.helpers import launch, make_bot

# Texts a search must answer, never refuse (possibly with no memory): by every method, through every front end
ODD_QUERIES = {
    "punctuation": "?!?!... ...",
    "emoji": "😀🎉🔥👍",
    "paste": "고양이 " * 4_000 + "나비 판교 " * 2_000,  # 20,000 characters and more: a pasted document
    "mixed": "我的猫 나비는 good cat이야, 博物館에서 Caroline 만났어 2026年",
}
RATE = 40  # requests a minute per token on the test server
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@contextlib.contextmanager
def serve_api(data: Path) -> Iterator[tuple[str, object, Chatbot, Path]]:
    """The app with its API on a free 127.0.0.1 port: (API base URL, Blocks, bot, data folder)."""
    bot = make_bot(data / "keem.db")
    worker = Worker(bot, poll_s=0.05).start()
    app = build_app(bot, worker, api_rate=RATE)
    url = launch(app)
    try:
        yield f"{url}v1", app, bot, data
    finally:
        worker.stop()
        app.close()


def token_for(bot: Chatbot, name: str) -> str:
    return bot.store.tokens.create(bot.store.users.get_or_create(Chatbot.user_key(name)))[1]


def client(base: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # a kept-alive connection is dropped after 1 s idle: uvicorn closes one idle for 5 s, and a request sent on it
    # just as it closes gets no answer ("Server disconnected"), seen on a loaded machine
    return httpx.Client(base_url=base, headers=headers, timeout=30, limits=httpx.Limits(keepalive_expiry=1))


def end_and_wait(c: httpx.Client, **params: str) -> int:
    """End the API conversation and wait for its memory update; the version it made."""
    r = c.post("/sessions/end", params=params)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = c.get(f"/jobs/{job_id}", params=params).json()
        if job["status"] == "done":
            return int(job["version"])
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def code(r: httpx.Response) -> str:
    assert r.headers["content-type"].startswith("application/json"), r.text
    return str(r.json()["error"]["code"])


def run_example(name: str, typed: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run examples/NAME as a builder would, `typed` on its standard input, with `env` (KEEM_URL, KEEM_TOKEN...)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        input=typed,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done
