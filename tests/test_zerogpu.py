"""ZeroGPU: with a stand-in `spaces` package (tests/zerogpu_stub) reporting ZeroGPU, every model call of a reply and
of a memory update runs inside a decorated call, updates run in the user's events (not the background worker), and
an update the GPU time limit cuts stays pending until the user's next event finishes it. The stand-in pickles what
crosses each GPU call. `python app.py` on ZeroGPU, in its own process and a browser: tests/e2e/test_zerogpu_app.py."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chatbot.deploy import zerogpu
from chatbot.web.app import build_app
from chatbot.web.backend import Backend
from chatbot.web.catch_up import CatchUp
from chatbot.web.chat import ChatUI
from chatbot.web.messages import GPU_CONTINUES, GPU_GAVE_UP, MESSAGES, korean_stored_error
from chatbot.web.view import PageView
from chatbot.worker import Worker
from memory.updaters import UpdateInput
from models.base import ChatStream, GenerationOptions, Message
from models.fake import ScriptedChatModel, section, stage_of
from tests.helpers import answer, drain, make_bot, say

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

    def __init__(self, stub: Any, responder: Callable[[list[Message]], str] = answer):
        super().__init__(responder=responder)
        self.stub, self.seen = stub, []

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        kind = "chat" if "당신은 사용자와" in messages[0]["content"] else "update"
        self.seen.append((kind, self.stub.running()))
        return (yield from super().stream(messages, options))


def zero_ui(tmp_path: Path, stub: Any, responder: Any = answer, **settings: Any) -> tuple[ChatUI, WatchedModel, Worker]:
    model = WatchedModel(stub, responder)
    bot = make_bot(tmp_path / "keem.db", model, **settings)
    worker = Worker(bot, poll_s=0.02).start()
    return ChatUI(bot, worker), model, worker


def catch_up(ui: ChatUI, state: Any) -> list[PageView]:
    """The event chained after a login, 대화 끝내기 or 새 대화 on ZeroGPU (chatbot/web/catch_up.py)."""
    return drain(CatchUp(ui.ctx).run(state))


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
        catch_up(ui, state)  # the event chained to "대화 끝내기"
        progress = ui.memory.poll(state)
        assert "완료" in progress.progress and "부산" in progress.memory.text  # the memory tab shows it
        chat = [running for kind, running in model.seen if kind == "chat"]
        update = [running for kind, running in model.seen if kind == "update"]
        assert chat == [["keem_reply"]] and update and all(r == ["keem_update"] for r in update)
        [asked] = [c["duration"] for c in spaces.calls if c["event"] == "start" and c["function"] == "keem_update"]
        calls = 4  # summarize, reflect, verify (a first memory is its summary), the records call
        assert asked == zerogpu.UPDATE_BASE_S + calls * zerogpu.UPDATE_PER_CALL_S + 2 * zerogpu.UPDATE_PER_TURN_S
    finally:
        worker.stop()


def session_ended(ui: ChatUI) -> tuple[Any, int]:
    """민수 says one thing and ends the conversation: (the tab's state, the update job waiting for the next event)."""
    state = ui.entry.login("민수").state
    say(ui, "나 다음 달에 마라톤 나가", state)
    ui.chat.end_session(state)
    return state, state.job_id


def test_an_update_the_gpu_time_limit_cuts_stays_pending_and_the_next_event_finishes_it(
    tmp_path: Path, spaces: Any
) -> None:
    ui, _model, worker = zero_ui(tmp_path, spaces)
    try:
        state, job_id = session_ended(ui)
        spaces._aborts["keem_update"] = 1  # ZeroGPU cuts the first try after its first stage
        frames = catch_up(ui, state)
        assert frames[-1].progress == f"{MESSAGES['gpu_stopped']} {GPU_CONTINUES}"  # it goes on at the next event
        job = ui.bot.store.queue.get(job_id)
        assert job["status"] == "pending" and "GPU task aborted" in job["last_error"]
        assert korean_stored_error(job["last_error"]) == MESSAGES["gpu_stopped"]  # as the memory tab lists it
        assert ui.bot.engine.current(state.user_id) is None  # nothing half-done became memory
        again = ui.entry.login("민수").state  # the user's next event runs it again, asking for more time
        catch_up(ui, again)
        assert ui.bot.store.queue.get(job_id)["status"] == "done"
        assert "마라톤" in " ".join(ui.bot.engine.current(state.user_id).texts)
        first, second = [
            c["duration"] for c in spaces.calls if c["event"] == "start" and c["function"] == "keem_update"
        ]
        assert second == min(2 * first, zerogpu.UPDATE_MAX_S)
    finally:
        worker.stop()


def test_an_update_zerogpu_cuts_on_every_try_says_it_stopped_and_where_to_retry(tmp_path: Path, spaces: Any) -> None:
    """After its last try an update is failed for good: the progress line no longer promises the next event, it
    points at the memory tab's retry; the memory tab lists the failure with its Korean reason and the retry button."""
    ui, _model, worker = zero_ui(tmp_path, spaces)
    try:
        state, job_id = session_ended(ui)
        spaces._aborts["keem_update"] = 100  # ZeroGPU cuts every try
        lines = []
        for _ in range(20):
            lines.append(catch_up(ui, state)[-1].progress)
            if ui.bot.store.queue.get(job_id)["status"] == "failed":
                break
        job = ui.bot.store.queue.get(job_id)
        assert job["status"] == "failed" and len(lines) == job["attempts"] > 1
        assert all(line == f"{MESSAGES['gpu_stopped']} {GPU_CONTINUES}" for line in lines[:-1])
        assert lines[-1] == f"{MESSAGES['gpu_stopped']} {GPU_GAVE_UP}"
        panel = ui.memory.panel(state)
        assert MESSAGES["gpu_stopped"] in panel.jobs and panel.retry == {"visible": True, "__type__": "update"}
        assert ui.bot.engine.current(state.user_id) is None  # the old (empty) memory, untouched
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


SEOUL, BUSAN = "사용자는 서울 마포구에 산다.", "사용자는 2026년 11월 말에 부산으로 이사했다."


def every_call(messages: list[Message]) -> str:
    """An update model whose answers are good and make every call an update's steps then make: the rewrite drops
    the old home (so the guard asks its judge, who says 예), verifications pass, the records call answers."""
    prompt = messages[-1]["content"]
    stage = stage_of(prompt)
    said = prompt.rsplit("\n대화 (", 1)[-1]
    if stage in ("summarize", "reflect"):
        return BUSAN if "이사" in said else SEOUL
    if stage == "update":
        return "\n".join([*(line for line in section(prompt, "\n이전 기억:", "이번 요약:") if line != SEOUL), BUSAN])
    if stage == "guard":
        return "\n".join(f"{n}: 예" for n, _ in enumerate(section(prompt, "\n질문:", "답:"), 1))
    if stage == "verify":
        return "통과"
    if stage == "emotions":
        return ""
    if stage == "operations":
        return "APPEND"
    if stage == "cues":
        return "1: 집, 이사"
    return answer(messages)


@pytest.mark.parametrize(
    ("strategy", "cues"), [("keem", False), ("accumulate", False), ("operations", False), ("keem", True)]
)
def test_an_updates_gpu_time_counts_the_model_calls_its_strategy_makes(
    tmp_path: Path, spaces: Any, monkeypatch: pytest.MonkeyPatch, strategy: str, cues: bool
) -> None:
    """Two sessions (a first memory, then one that changes it) run through ZeroGPU with a model whose good answers
    make every call the steps then make: each GPU call asks for UPDATE_PER_CALL_S per model call made inside it
    (exactly that many for keem and accumulate: the estimate counts calls, not guesses), at most UPDATE_MAX_S."""
    ui, model, worker = zero_ui(tmp_path, spaces, every_call, strategy=strategy, memory_cues=cues)
    estimates: list[tuple[UpdateInput, int]] = []
    count = ui.bot.runner.calls
    monkeypatch.setattr(ui.bot.runner, "calls", lambda s, inp: estimates.append((inp, n := count(s, inp))) or n)
    try:
        state = ui.entry.login("민수").state
        made = []
        for said in ("나 서울 마포구에 살아", "나 지난주에 부산으로 이사했어"):
            say(ui, said, state)
            ui.chat.end_session(state)
            before = len(model.seen)
            catch_up(ui, state)
            made.append(sum(running == ["keem_update"] for _, running in model.seen[before:]))
            ui.chat.new_session(state)
        assert [s.text for s in ui.bot.engine.current(state.user_id).sentences][-1] == BUSAN
        asked = [c["duration"] for c in spaces.calls if c["event"] == "start" and c["function"] == "keem_update"]
        assert len(asked) == len(estimates) == len(made) == 2
        for (inp, estimate), calls, duration in zip(estimates, made, asked):
            assert duration == zerogpu.update_duration(estimate, inp) <= zerogpu.UPDATE_MAX_S
            assert calls <= estimate and duration >= min(zerogpu.update_duration(calls, inp), zerogpu.UPDATE_MAX_S)
            if not cues and not (strategy == "operations" and inp.previous):  # there the bound is all it can know
                assert calls == estimate
        if strategy == "keem":  # summarize, reflect, the rewrite, the judge, the verification, the records call
            assert made[1] == 6 + cues
    finally:
        worker.stop()


def test_on_zerogpu_one_watch_follows_each_event_that_gives_a_tab_an_update(tmp_path: Path, spaces: Any) -> None:
    """After 대화 끝내기 (or a retry) a watch follows the update and sees what the catch-up chained beside it does; a
    second watch after the catch-up raced the first, whose 대기, sent late on a loaded machine, stayed on the page
    after the second one's 완료. A login's watch follows what was under way; 새 대화 has none: its catch-up's does."""
    ui, _, worker = zero_ui(tmp_path, spaces)
    try:
        deps = build_app(ui.bot, worker).config["dependencies"]
    finally:
        worker.stop()
    by_id = {d["id"]: d for d in deps}

    def after(dep: dict[str, Any]) -> dict[str, Any] | None:
        return by_id.get(dep.get("trigger_after"))

    def chain(dep: dict[str, Any]) -> list[str]:  # the api names of the events it runs after, nearest first
        names, up = [], after(dep)
        while up is not None:
            names.append(str(up.get("api_name")))
            up = after(up)
        return names

    watched = [chain(d) for d in deps if str(d.get("api_name")).startswith("watch")]
    for starter in ("end_session", "retry_failed", "new_session", "login"):
        assert sum(starter in c for c in watched) == 1, (starter, watched)
    assert ["end_session"] in watched and ["retry_failed"] in watched and ["login"] in watched  # the catch-up beside
