"""ZeroGPU: with a stand-in `spaces` package (tests/zerogpu_stub) reporting ZeroGPU, every model call of a reply and
of a memory update runs inside a decorated call, updates run in the user's events (not the background worker), and
an update the GPU time limit cuts stays pending until the user's next event finishes it. The stand-in pickles what
crosses each GPU call. `python app.py` on ZeroGPU, in its own process and a browser: tests/e2e/test_zerogpu_app.py."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatbot.deploy import zerogpu
from chatbot.web.backend import Backend
from chatbot.web.chat import ChatUI
from chatbot.worker import Worker
from models.base import ChatStream, GenerationOptions, Message
from models.fake import ScriptedChatModel
from tests.test_ui import answer, drain, make_bot, say

ROOT = Path(__file__).resolve().parents[1]
STUB = Path(__file__).resolve().parent / "zerogpu_stub"


@pytest.fixture
def spaces(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in `spaces` package on sys.path, reporting ZeroGPU; gone again afterwards."""
    monkeypatch.syspath_prepend(str(STUB))
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    for name in [m for m in sys.modules if m == "spaces" or m.startswith("spaces.")]:
        monkeypatch.delitem(sys.modules, name)
    zerogpu.active.cache_clear()
    import spaces as stub

    assert zerogpu.active()
    yield stub
    zerogpu.active.cache_clear()
    for name in [m for m in sys.modules if m == "spaces" or m.startswith("spaces.")]:
        del sys.modules[name]


class WatchedModel(ScriptedChatModel):
    """The scripted model, noting for each call which decorated calls were under way."""

    def __init__(self, stub: Any):
        super().__init__(responder=answer)
        self.stub, self.seen = stub, []

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        kind = "chat" if "당신은 사용자와" in messages[0]["content"] else "update"
        self.seen.append((kind, self.stub.running()))
        return (yield from super().stream(messages, options))


def zero_ui(tmp_path: Path, stub: Any) -> tuple[ChatUI, WatchedModel, Worker]:
    model = WatchedModel(stub)
    bot = make_bot(tmp_path / "keem.db", model)
    worker = Worker(bot, poll_s=0.02).start()
    return ChatUI(bot, worker), model, worker


def test_reply_and_update_run_inside_gpu_functions_called_from_the_users_events(tmp_path: Path, spaces: Any) -> None:
    ui, model, worker = zero_ui(tmp_path, spaces)
    try:
        assert ui.zero is not None and not worker.run_jobs
        decorated = {c["function"] for c in spaces.calls if c["event"] == "decorated"}
        assert {"keem_reply", "keem_update"} <= decorated  # before any event: ZeroGPU wants them at startup
        state = ui.entry.login("민수").state
        _, frames = say(ui, "나 지난주에 부산으로 이사했어", state)
        assert "네, 잘 들었어요" in frames[-1].chat[-1]["content"]
        assert [c["event"] for c in spaces.calls if c.get("function") == "keem_reply"][-2:] == ["start", "end"]
        out = ui.chat.end_session(state)
        assert "기억 갱신" in out.progress and state.job_id is not None
        time.sleep(0.2)  # the background worker leaves it alone on ZeroGPU
        assert ui.bot.store.queue.get(state.job_id)["status"] == "pending"
        drain(ui.zero.catch_up(state))  # the event chained to "대화 끝내기"
        progress = ui.memory.poll(state)
        assert "완료" in progress.progress and "부산" in progress.memory.text  # the memory tab shows it
        chat = [running for kind, running in model.seen if kind == "chat"]
        update = [running for kind, running in model.seen if kind == "update"]
        assert chat == [["keem_reply"]] and update and all(r == ["keem_update"] for r in update)
        [asked] = [c["duration"] for c in spaces.calls if c["event"] == "start" and c["function"] == "keem_update"]
        assert asked == zerogpu.UPDATE_BASE_S + 2 * zerogpu.UPDATE_PER_TURN_S  # no memory yet, two turns
    finally:
        worker.stop()


def test_an_update_the_gpu_time_limit_cuts_stays_pending_and_the_next_event_finishes_it(
    tmp_path: Path, spaces: Any
) -> None:
    ui, _model, worker = zero_ui(tmp_path, spaces)
    try:
        state = ui.entry.login("민수").state
        say(ui, "나 다음 달에 마라톤 나가", state)
        ui.chat.end_session(state)
        job_id = state.job_id
        spaces._aborts["keem_update"] = 1  # ZeroGPU cuts the first try after its first stage
        frames = drain(ui.zero.catch_up(state))
        assert "GPU 시간 안에 끝나지 못했습니다" in frames[-1][0]
        job = ui.bot.store.queue.get(job_id)
        assert job["status"] == "pending" and "GPU task aborted" in job["last_error"]
        assert ui.bot.engine.current(state.user_id) is None  # nothing half-done became memory
        again = ui.entry.login("민수").state  # the user's next event runs it again, asking for more time
        drain(ui.zero.catch_up(again))
        assert ui.bot.store.queue.get(job_id)["status"] == "done"
        assert "마라톤" in " ".join(ui.bot.engine.current(state.user_id).texts)
        first, second = [
            c["duration"] for c in spaces.calls if c["event"] == "start" and c["function"] == "keem_update"
        ]
        assert second == min(2 * first, zerogpu.UPDATE_MAX_S)
    finally:
        worker.stop()


def test_on_zerogpu_the_models_load_in_the_main_thread_before_the_app_is_built(tmp_path: Path, spaces: Any) -> None:
    bot = make_bot(tmp_path / "keem.db")
    threads = []

    def load() -> tuple[Any, Worker]:
        threads.append(threading.current_thread())
        return bot, Worker(bot)

    backend = Backend.loading(load)
    assert backend.done.is_set() and threads == [threading.main_thread()]
    ui = ChatUI(backend)
    assert ui.zero is not None and ui.bot.chat_model.spec == bot.chat_model.spec


def test_without_zerogpu_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACES_ZERO_GPU", "")
    zerogpu.active.cache_clear()
    try:
        bot = make_bot(tmp_path / "keem.db")
        worker = Worker(bot)
        assert not zerogpu.active() and worker.run_jobs and ChatUI(bot, worker).zero is None
    finally:
        zerogpu.active.cache_clear()
