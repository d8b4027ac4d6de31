"""What keeps a page turn cheap for the app, through the served app as the browser drives it: a fast stream becomes a
few frames with the whole reply in the last, a failure mid-stream loses nothing that streamed, every frame sends
only what it changes, and following a memory update is one event held open, not a poll a second (docs/scaling.md,
"Capacity measured")."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from chatbot.web.frames import FRAME_S
from memory.store import Store
from models.errors import GenerationError
from models.fake import ScriptedChatModel
from tests.helpers import answer, call, dep_index, serve

PIECES = 400  # one character each, 1 ms apart: about 0.4 s of stream, 400 chances for a frame


class FastModel(ScriptedChatModel):
    """Chat replies as PIECES one-character pieces, 1 ms apart (a fast server streaming tokens); with `fail_after`,
    the stream breaks after that many pieces."""

    def __init__(self, fail_after: int | None = None):
        super().__init__(responder=answer)
        self.fail_after = fail_after

    def stream(self, messages: Any, options: Any = None) -> Any:
        if "당신은" not in str(messages[0]["content"]):  # an update step: as the scripted model answers
            return (yield from super().stream(messages, options) if options else super().stream(messages))
        for i, ch in enumerate(reply_text()):
            if self.fail_after is not None and i == self.fail_after:
                raise GenerationError("the server closed the stream")
            time.sleep(0.001)
            yield ch
        return None


def reply_text() -> str:
    return ("가나다라마바사아자차" * (PIECES // 10))[:PIECES]


def stored(bot: Any) -> list[tuple[str, str]]:
    """Every turn in the store, oldest first: (role, text)."""
    return [(r["role"], r["text"]) for r in bot.store.rows("select role, text from turns order by id")]


def test_a_fast_stream_is_a_few_frames_and_the_last_holds_the_whole_reply(tmp_path: Path) -> None:
    url, app, bot, worker = serve(tmp_path / "keem.db", model=FastModel())
    try:
        who = uuid.uuid4().hex
        call(url, dep_index(app, "login"), ["민수", None], who)
        call(url, dep_index(app, "send"), ["안녕", None], who)
        started = time.monotonic()
        messages = call(url, dep_index(app, "respond"), [None], who)
        took = time.monotonic() - started
        frames = [m for m in messages if m.get("msg") == "process_generating"]
        # 400 pieces in about half a second: the first frame at once, then one at most every FRAME_S, not one a piece
        assert 2 <= len(frames) <= 2 + took / FRAME_S < PIECES / 10, (len(frames), took)
        done = next(m for m in messages if m.get("msg") == "process_completed")
        assert done["success"], done
        assert stored(bot)[-1] == ("assistant", reply_text())
        # the first frame names each output; one it leaves as it is (the used-memory panel) is Gradio's bare update
        assert {"__type__": "update"} in frames[0]["output"]["data"]
        # Gradio's queue keeps a short table of its events for a /monitoring page the app does not serve
        assert app._queue.ANALYTICS_MAX_EVENTS == 100 and app._queue.ANAYLTICS_CACHE_FREQUENCY == 10_000
        # no timer polls the update's progress (an event a second per tab): the page follows it with one event
        assert not [c for c in app.config["components"] if c.get("type") == "timer" and c["props"]["value"] == 1.0]
    finally:
        worker.stop()
        app.close()


def test_a_stream_that_breaks_mid_way_keeps_what_streamed_and_says_so(tmp_path: Path) -> None:
    url, app, bot, worker = serve(tmp_path / "keem.db", model=FastModel(fail_after=250))
    try:
        who = uuid.uuid4().hex
        call(url, dep_index(app, "login"), ["민수", None], who)
        call(url, dep_index(app, "send"), ["안녕", None], who)
        messages = call(url, dep_index(app, "respond"), [None], who)
        assert len([m for m in messages if m.get("msg") == "process_generating"]) < PIECES / 10
        # every piece that streamed before the break is stored, as the reply it was
        assert stored(bot) == [("user", "안녕"), ("assistant", reply_text()[:250])]
    finally:
        worker.stop()
        app.close()


def test_a_turn_is_two_events_and_a_reply_to_a_forgotten_user_shows_the_start_screen(tmp_path: Path) -> None:
    """Sending and the reply's stream are a turn's only queued events: no check is chained after a reply, since the
    stream itself tells a tab whose user was forgotten meanwhile (another tab, `keem memory forget`)."""
    url, app, bot, worker = serve(tmp_path / "keem.db", model=FastModel())
    try:
        deps = app.config["dependencies"]
        send, respond = dep_index(app, "send"), dep_index(app, "respond")
        assert [d["api_name"] for d in deps if d["trigger_after"] == deps[send]["id"]] == ["respond"]
        assert [d["api_name"] for d in deps if d["trigger_after"] == deps[respond]["id"]] == []
        who = uuid.uuid4().hex
        call(url, dep_index(app, "login"), ["민수", None], who)
        call(url, send, ["안녕", None], who)
        Store(tmp_path / "keem.db").users.delete(bot.store.users.require("민수"))  # another process forgets 민수
        messages = call(url, respond, [None], who)
        done = next(m for m in messages if m.get("msg") == "process_completed")
        assert done["success"], done
        shown = dict(zip(deps[respond]["outputs"], done["output"]["data"], strict=True))
        ids = {c.get("props", {}).get("elem_id"): c["id"] for c in app.config["components"]}
        assert shown[ids["login"]]["visible"] is True and shown[ids["main"]]["visible"] is False
        assert shown[ids["chat"]] == []  # nothing of the conversation stays on the page
        warned = [m["log"] for m in messages if m.get("msg") == "log"]
        assert any("삭제되었습니다" in text for text in warned), warned  # the tab is told why
        assert stored(bot) == []  # nothing of 민수 is left, and the reply stored nothing
    finally:
        worker.stop()
        app.close()


class SlowUpdates(FastModel):
    """FastModel, with every call once `ending` is set (the memory update's) waiting for `gate`, then taking
    UPDATE_STEP_S (a model server working on a long prompt)."""

    def __init__(self) -> None:
        super().__init__()
        self.ending, self.gate = threading.Event(), threading.Event()

    def stream(self, messages: Any, options: Any = None) -> Any:
        if self.ending.is_set():
            self.gate.wait(30)
            time.sleep(UPDATE_STEP_S)
        return (yield from super().stream(messages, options))


UPDATE_STEP_S = 0.3


def end_session(url: str, app: Any, who: str) -> dict[str, Any]:
    """대화 끝내기 as the page posts it (an unqueued event)."""
    body = {"data": [None, ""], "fn_index": dep_index(app, "end_session"), "session_hash": who, "event_data": None}
    answer = httpx.post(url + "gradio_api/run/predict", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def join(client: httpx.Client, fn_index: int, who: str) -> str:
    """Queue an event of the tab `who` as the page does; its event id."""
    body = {"data": [None], "fn_index": fn_index, "session_hash": who, "event_data": None, "trigger_id": None}
    joined = client.post("gradio_api/queue/join", json=body)
    assert joined.status_code == 200, joined.text
    return str(joined.json()["event_id"])


def frames(messages: list[dict[str, Any]], outputs: list[int]) -> list[dict[int, Any]]:
    """Each frame an event sent (its generating messages, then its completion), as {component id: value}."""
    sent = [m for m in messages if m.get("msg") in ("process_generating", "process_completed")]
    return [dict(zip(outputs, m["output"]["data"], strict=True)) for m in sent if m.get("output", {}).get("data")]


def test_an_update_is_followed_by_one_event_that_sends_a_frame_only_when_its_progress_changes(tmp_path: Path) -> None:
    """After 대화 끝내기 the page does not poll: one event (`watch`, chained after it) reads the update's progress
    once a second and sends a frame only when the progress line or the card's stages change; its last frame brings
    the memory tab. A second watch of the same tab (a retry while one follows) takes over: the first ends without
    a frame more. Both come on the tab's one event stream, as in the browser."""
    model = SlowUpdates()
    url, app, bot, worker = serve(tmp_path / "keem.db", model=model)
    try:
        deps = app.config["dependencies"]
        watch, ended = dep_index(app, "watch"), dep_index(app, "end_session")
        assert deps[watch]["trigger_after"] == deps[ended]["id"]
        outputs = deps[watch]["outputs"]
        progress, history = outputs[0], outputs[3]  # Flow.FOLLOWED: progress, then the panel (jobs, memory, history)
        who = uuid.uuid4().hex
        call(url, dep_index(app, "login"), ["민수", None], who)
        call(url, dep_index(app, "send"), ["나 다음 달에 부산으로 이사 가", None], who)
        call(url, dep_index(app, "respond"), [None], who)
        model.ending.set()
        assert "기억 갱신" in str(end_session(url, app, who))
        by_event: dict[str, list[dict[str, Any]]] = {}
        with httpx.Client(base_url=url, timeout=60) as client:
            first = join(client, watch, who)
            time.sleep(1.5)  # the first watch has sent its frame and waits for the next change
            second, started = join(client, watch, who), time.monotonic()
            threading.Timer(1.5, model.gate.set).start()  # the update runs once both watches wait
            with client.stream("GET", "gradio_api/queue/data", params={"session_hash": who}) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data:"):
                        msg = json.loads(line[5:])
                        by_event.setdefault(str(msg.get("event_id")), []).append(msg)
                        done = [
                            e
                            for e in (first, second)
                            if any(m.get("msg") == "process_completed" for m in by_event.get(e, []))
                        ]
                        if len(done) == 2:
                            break
        took = time.monotonic() - started
        early, late = frames(by_event[first], outputs), frames(by_event[second], outputs)
        lines = [f[progress] for f in late if isinstance(f[progress], str)]
        # about one read a second for the whole update, yet a frame only per change: no line is sent twice running
        assert took > 1.0 and len(late) <= 2 + took, (len(late), took)
        assert all(a != b for a, b in itertools.pairwise(lines)), lines
        assert "완료" in lines[-1] and not lines[-1].endswith("…"), lines
        assert isinstance(late[-1][history], str)  # the memory tab came with the last frame (its versions)
        assert early and not any(isinstance(f[history], str) for f in early)  # taken over: no memory tab there
        assert bot.store.versions.latest(bot.store.users.require("민수")) is not None
    finally:
        worker.stop()
        app.close()
