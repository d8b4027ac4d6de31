"""What the fast tests share to drive the app: a bot on a scripted model, the page's handlers called as the
browser calls them, the app served on a free port, a study plan."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from chatbot.trials.web import Participant, StudyUI, StudyView, trial_page
from chatbot.web.app import build_app, launch_options, queue_options
from chatbot.web.backend import Backend
from chatbot.web.chat import ChatUI
from chatbot.web.messages import korean_error
from chatbot.web.state import UserState
from chatbot.web.view import PageView
from chatbot.worker import Worker
from models.embedders import NgramEmbedder
from models.errors import KeemError
from models.fake import ScriptedChatModel, stage_of


def answer(messages: list[dict[str, Any]]) -> str:
    """A scripted model for both chat and updates: update stages answer from their prompt, chat echoes kindly."""
    prompt = messages[-1]["content"]
    stage = stage_of(prompt)
    if stage == "summarize":
        dialogue = prompt.rsplit("\n대화 (", 1)[-1]
        users = [line[4:].strip() for line in dialogue.splitlines() if line.startswith("사용자:")]
        return "\n".join(f"사용자는 '{u[:60]}'라고 말했다." for u in users) or "사용자는 인사했다."
    if stage == "reflect":
        return prompt.rsplit("\n요약:\n", 1)[-1].rsplit("\n답:", 1)[0]
    if stage == "update":
        tail = prompt.rsplit("\n이전 기억:\n", 1)[-1]
        return "\n".join(line for line in tail.splitlines() if line.startswith("사용자는"))
    if stage == "verify":
        return "통과"
    if stage == "guard":
        return "아니오"
    return f"네, 잘 들었어요: {prompt[:30]}"


def make_bot(db: Path, model: ScriptedChatModel | None = None, **settings: Any) -> Chatbot:
    model = model or ScriptedChatModel(responder=answer)
    return Chatbot(Settings(db=str(db), **settings), chat_model=model, embedder=NgramEmbedder())


def run_async(coroutine: Any) -> Any:
    """asyncio.run in a thread of its own: a pytest-xdist worker that ran a Playwright test before keeps an event
    loop running in its main thread, where asyncio.run refuses to start another."""
    result: list[Any] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(coroutine))
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]
    return result[0]


def drain(gen: Iterator[Any]) -> list[Any]:
    return list(gen)


def say(ui: ChatUI, text: str, state: UserState) -> tuple[PageView, list[PageView]]:
    """Type a message and let the page's chained `respond` answer: (send's view, respond's frames)."""
    return ui.chat.send(text, state), drain(ui.chat.respond(state))


def login(ui: ChatUI, name: str) -> UserState:
    return ui.entry.login(name).state


def wait_job(ui: ChatUI, state: UserState, timeout: float = 10) -> PageView:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = ui.memory.poll(state)
        if state.job_id is None:
            return out
        time.sleep(0.05)
    raise AssertionError("the update job did not finish")


# -- the launched app: what an anonymous or other client can reach ---------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(
    db: Path,
    auth: list[tuple[str, str]] | None = None,
    model: ScriptedChatModel | None = None,
    browser_identity: bool = False,
    study: Any = None,
    admin_password: str | None = None,
    **settings: Any,
) -> tuple[str, gr.Blocks, Chatbot, Worker]:
    """Launch the app in this process on a free 127.0.0.1 port; the caller closes app and worker."""
    bot = make_bot(db, model, **settings)
    worker = Worker(bot, poll_s=0.05).start()
    trial = trial_page(study, admin_password) if study is not None else None
    app = build_app(bot, worker, browser_identity=browser_identity, study=study, trial=trial)
    return launch(app, auth=auth), app, bot, worker


def launch(app: gr.Blocks, **options: Any) -> str:
    """Serve `app` from this process on a free 127.0.0.1 port as the app's own launch does (chatbot/cli/chat.py:
    queue_options, launch_options); returns its URL."""
    port = free_port()
    app.queue(**queue_options()).launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        footer_links=[],
        run_history=False,
        **{**launch_options(app), **options},
    )
    # `app.close()` waits for uvicorn's graceful shutdown, which waits for every open page's event stream, and
    # Gradio gives up on it only after 5 s: a test closing its app with a page still open paid those 5 s (most
    # browser tests did). Open streams now get a second, then are cut (the test is done with its pages).
    assert app.server is not None
    app.server.config.timeout_graceful_shutdown = 1
    return f"http://127.0.0.1:{port}/"


def call(
    url: str,
    fn_index: int,
    data: list[Any],
    session_hash: str,
    cookies: httpx.Cookies | None = None,
    client: httpx.Client | None = None,
) -> list[dict[str, Any]]:
    """Run one event the way the browser does (queue/join, then the SSE stream); returns the messages. `client`:
    one kept open for many calls (a new client costs ~25 ms, most of a sweep's time)."""
    with (
        contextlib.nullcontext(client) if client else httpx.Client(base_url=url, timeout=30, cookies=cookies) as client
    ):
        joined = client.post(
            "gradio_api/queue/join",
            json={
                "data": data,
                "fn_index": fn_index,
                "session_hash": session_hash,
                "event_data": None,
                "trigger_id": None,
            },
        )
        if joined.status_code != 200:
            return [{"msg": "refused", "status": joined.status_code, "text": joined.text}]
        messages = []
        with client.stream("GET", "gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    messages.append(msg)
                    if msg.get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                        break
        return messages


def dep_index(app: gr.Blocks, name: str) -> int:
    return next(i for i, d in enumerate(app.config["dependencies"]) if d.get("api_name") == name)


PLAN = {
    "id": "pilot-ui",
    "title": "기억하는 챗봇 사용자 연구",
    "strategies": ["keem", "accumulate", "operations"],
    "sessions": 2,
    "min_gap_hours": 20,
    "consent": "연구 참여 동의서: 대화 내용은 연구에만 쓰입니다.",
}


def enter(sui: StudyUI, name: str) -> tuple[Participant | None, StudyView]:
    """Press start: (participant, enter's view); the page then chains `open_chat` (chat_state)."""
    out = sui.enter(name)
    return out.person, out


def chat_state(sui: StudyUI, person: Participant) -> UserState | None:
    state = sui.open_chat(person).state
    return state if isinstance(state, UserState) else None


def gated(bot: Chatbot, gate: threading.Event) -> Backend:
    def load() -> tuple[Chatbot, Worker]:
        gate.wait(30)
        return bot, Worker(bot, poll_s=0.05).start()

    return Backend.loading(load)


@contextlib.contextmanager
def refused(match: str) -> Iterator[Any]:
    """The page refuses what the block does: a KeemError whose Korean message, the one the page shows
    (chatbot/web/messages.py), says `match` (a regular expression)."""
    with pytest.raises(KeemError) as caught:
        yield caught
    said = korean_error(caught.value)
    assert re.search(match, said), said
