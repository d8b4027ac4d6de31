"""The browser app's handlers, the job worker, and the launched app's API surface (scripted model, n-gram embedder)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import date
from pathlib import Path
from typing import Any

import fastapi
import gradio as gr
import httpx
import pytest

from chatbot.bot import Chatbot
from chatbot.cli.chat import add_chat_parser, settings_from_args
from chatbot.session import check_user_name, clean_message
from chatbot.settings import Settings
from chatbot.web.app import build_app
from chatbot.web.backend import Backend
from chatbot.web.chat import ChatUI
from chatbot.web.messages import LOADING, korean_error
from chatbot.web.render import (
    is_emotion,
    md,
    model_banner,
    render_sentences,
    shown,
    stage_text,
)
from chatbot.web.view import KEEP, PageView
from chatbot.worker import Worker
from memory.diff import version_diff
from memory.store import Sentence
from models.errors import GenerationError, InputError, KeemError
from models.fake import ScriptedChatModel
from tests.conftest import dead_owner
from tests.helpers import (
    answer,
    call,
    dep_index,
    drain,
    launch,
    login,
    make_bot,
    say,
    serve,
    wait_job,
)

SECRET = "사용자는 비밀번호를 고양이 이름 나비로 정했다"


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[ChatUI]:
    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot, poll_s=0.05)
    yield ChatUI(bot, worker)
    worker.stop()


# -- handlers, called directly ---------------------------------------------------------------------
def test_chat_streams_persists_and_shows_hits(ui: ChatUI) -> None:
    state = login(ui, "민수")
    sent, frames = say(ui, "안녕! 나 오늘 부산에 왔어", state)
    assert sent.message == ""  # accepted: the box clears
    assert sent.chat[-2] == {"role": "user", "content": "안녕! 나 오늘 부산에 왔어"}
    assert sent.chat[-1]["content"] == "…"  # the user's message shows before generation
    final = frames[-1].chat
    assert final[-1]["role"] == "assistant" and final[-1]["content"].startswith("네, 잘 들었어요")
    assert [t["role"] for t in ui.bot.store.turns.of_session(state.session.session_id)] == ["user", "assistant"]
    assert "참고한 기억이 없어요" in frames[-1].hits


class PacedModel(ScriptedChatModel):
    """Chat pieces 5 ms apart, as a fast server streams tokens."""

    def stream(self, messages: Any, options: Any = None) -> Any:
        pieces = super().stream(messages, options) if options else super().stream(messages)
        while True:
            try:
                piece = next(pieces)
            except StopIteration as done:
                return done.value
            time.sleep(0.005)
            yield piece


def test_replies_streaming_at_once_share_a_budget_of_frames() -> None:
    """One reply alone shows a frame every FRAME_S; 32 at once (an openai: server's slots) share FRAMES_PER_S, so the
    process sends about as many frames a second however many stream (each frame is the whole chat, diffed under one
    GIL); every reply's first frame shows at once, and a reply that ends gives its share back."""
    from chatbot.web.frames import FRAME_S, FRAMES_PER_S, Frames

    frames = Frames()
    with frames.stream() as due:
        assert due() and not due() and frames.interval() == FRAME_S
    with ExitStack() as stack:
        dues = [stack.enter_context(frames.stream()) for _ in range(32)]
        assert frames.interval() == 32 / FRAMES_PER_S
        started, shown = time.monotonic(), 0
        while time.monotonic() - started < 0.5:
            shown += sum(due() for due in dues)
            time.sleep(0.002)
        assert 32 <= shown <= 32 + 0.5 * FRAMES_PER_S + 32, shown  # the first frames, then the shared budget
    assert frames.streaming == 0 and frames.interval() == FRAME_S


def test_a_reply_streams_in_frames_not_one_per_token_and_the_last_frame_is_whole(tmp_path: Path) -> None:
    reply = "네 " * 160  # 80 pieces 5 ms apart: about 0.4 s, two FRAME_S (80 words were 40 pieces, one FRAME_S)
    bot = make_bot(tmp_path / "k.db", PacedModel(responder=lambda m: reply if "당신은" in m[0]["content"] else "통과"))
    ui = ChatUI(bot, Worker(bot))
    state = login(ui, "민수")
    _, frames = say(ui, "안녕", state)
    assert 3 <= len(frames) < 20, len(frames)  # it streams, at most a frame per FRAME_S (else about 80)
    # the stored reply is stripped: a frame that streamed the trailing space is not longer than the final one
    shown = [f.chat[-1]["content"].rstrip() for f in frames]
    assert all(a.startswith("네") and len(a) <= len(b) for a, b in itertools.pairwise(shown))
    assert shown[-1].strip() == reply.strip()  # nothing of the reply is held back


def test_bad_input_is_a_korean_warning_and_the_app_stays_usable(ui: ChatUI) -> None:
    state = login(ui, "민수")
    for bad in ("", "   \n\t ", "\x00\x07\x1b", "가" * 100_000):
        sent, frames = say(ui, bad, state)
        assert sent.message is KEEP  # refused: the text stays in the box
        assert frames == [PageView()] and ui.bot.store.turns.of_session(state.session.session_id) == []
    with pytest.raises(InputError) as empty:
        clean_message(" \x00 ", 4000)
    assert korean_error(empty.value).startswith("빈 메시지")
    with pytest.raises(InputError) as long:
        clean_message("가" * 100_000, 4000)
    assert "100,000자, 최대 4,000자" in korean_error(long.value)
    with pytest.raises(InputError) as name:
        check_user_name("<b>")
    assert korean_error(name.value).startswith("이름은")
    assert korean_error(InputError("anything else")) == "오류: anything else"
    say(ui, "이제 괜찮아", state)
    assert len(ui.bot.store.turns.of_session(state.session.session_id)) == 2


def test_a_message_sent_while_a_reply_streams_waits_and_is_answered_in_order(ui: ChatUI) -> None:
    """Issue 10: a message sent during streaming was thrown away. Now it waits, is shown, and is answered next."""
    state = login(ui, "민수")
    ui.chat.send("첫 번째 이야기: 오늘 면접을 봤어", state)
    stream = ui.chat.respond(state)
    next(stream)  # the first reply is streaming
    sent = ui.chat.send("두 번째 이야기: 결과는 다음 주래", state)  # typed while it streams
    assert sent.message == ""  # accepted, so (only then) the box clears
    assert [m["role"] for m in sent.chat[-3:]] == ["user", "assistant", "user"]  # first, its partial reply, second
    assert sent.chat[-1]["content"] == "두 번째 이야기: 결과는 다음 주래"
    assert "답변을 기다리는 메시지 1개" in sent.note
    stored = ui.bot.store.turns.of_session(state.session.session_id)  # stored when sent, before the first reply
    assert [t["text"] for t in stored] == ["첫 번째 이야기: 오늘 면접을 봤어", "두 번째 이야기: 결과는 다음 주래"]
    assert drain(ui.chat.respond(state)) == [PageView()]  # the page's second respond: the first one answers it
    frames = drain(stream)
    turns = ui.bot.store.turns.of_session(state.session.session_id)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert [turns[0]["text"], turns[2]["text"]] == [
        "첫 번째 이야기: 오늘 면접을 봤어",
        "두 번째 이야기: 결과는 다음 주래",
    ]
    assert all(t["text"].startswith("네, 잘 들었어요") for t in turns[1::2])
    assert [m["role"] for m in frames[-1].chat] == ["user", "assistant", "user", "assistant"] and frames[-1].note == ""
    assert ui.bot.chat_model.calls[-1][-1]["content"].startswith("두 번째")  # answered with the whole history
    assert [m["role"] for m in ui.bot.chat_model.calls[-1][1:]] == ["user", "assistant", "user"]
    assert not state.answering and not state.pending
    say(ui, "세 번째", state)  # and the next message is answered as usual
    assert len(ui.bot.store.turns.of_session(state.session.session_id)) == 6


def test_streaming_never_writes_the_textbox_so_a_draft_survives(tmp_path: Path) -> None:
    """Only `send` may change the message box (clearing what it accepted); the reply's frames never touch it."""
    app = build_app(make_bot(tmp_path / "k.db"))
    config = app.config
    box = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "message-input")
    deps = {d["api_name"]: d for d in config["dependencies"]}
    writers = sorted(name for name, d in deps.items() if box in d["outputs"])
    assert writers == ["end_session", "login", "new_session", "send"]
    assert deps["respond"]["trigger_mode"] == "multiple"  # a send during streaming reaches the server
    assert deps["respond"]["trigger_after"] == next(
        i for i, d in enumerate(config["dependencies"]) if d["api_name"] == "send"
    )


def test_a_message_waiting_for_its_reply_is_stored_when_sent_and_stays_when_the_session_ends(ui: ChatUI) -> None:
    """Issue 18: a message typed while a reply streamed was kept only in the tab until its turn (a crash lost it).
    It is a turn from the moment it is sent; ending the session leaves it there, unanswered, and the draft in
    the box as it is."""
    state = login(ui, "민수")
    ui.chat.send("첫 번째", state)
    stream = ui.chat.respond(state)
    next(stream)
    ui.chat.send("아직 답을 못 받은 말", state)
    sid = state.session.session_id
    assert [t["text"] for t in ui.bot.store.turns.of_session(sid)] == ["첫 번째", "아직 답을 못 받은 말"]
    out = ui.chat.end_session(state, "쓰던 초안")
    assert "value" not in out.message and out.message["interactive"] is False  # the draft stays in the box
    assert "답을 받지 못한 메시지 1개도 이 대화에 저장했습니다" in out.progress
    drain(stream)  # the reply streaming now still finishes, and the waiting message gets none in the ended session
    turns = ui.bot.store.turns.of_session(sid)
    assert [(t["role"], t["text"][:2]) for t in turns] == [("user", "첫 "), ("assistant", "네,"), ("user", "아직")]
    assert ui.chat.end_session(state, "").message is KEEP  # already ended: the box is left alone
    ui.chat.send("나간다", state)  # opens the next session, stored there
    assert state.session.session_id != sid and ui.bot.store.turns.of_session(state.session.session_id)
    ui.entry.logout(state)
    assert state.pending == []  # a tab that leaves gets nothing more answered


def test_outputs_are_named_so_an_event_shows_exactly_what_its_view_sets() -> None:
    """A view becomes {component: value} for its event's outputs by name: a part left KEEP is not touched, and a
    part the event does not output is an error naming it (never a value shifted onto the next component)."""
    from chatbot.web.view import as_outputs, wired

    with gr.Blocks():
        chat, note, hits = gr.Chatbot(), gr.Markdown(), gr.Markdown()
    outputs = {"chat": chat, "note": note, "hits": hits}
    assert as_outputs(PageView(chat=[], note="대기"), outputs) == {chat: [], note: "대기"}
    assert as_outputs(PageView(), outputs) == gr.skip()  # nothing changed: every output is skipped
    with pytest.raises(ValueError, match="'progress'"):
        as_outputs(PageView(chat=[], progress="x"), outputs)

    def broken(text: str) -> PageView:
        raise InputError("없는 문장입니다")

    handler = wired(broken, outputs)
    with pytest.warns(UserWarning, match="오류: 없는 문장입니다"):  # a Korean toast, and the page left as it was
        assert handler("x") == gr.skip()
    assert handler.__name__ == "broken"  # Gradio names the event (and finds gr.Request) by the handler's own


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "x'; drop table users; --", "", "a" * 65, "**굵게**"])
def test_bad_user_names_are_refused(ui: ChatUI, name: str) -> None:
    with pytest.raises(InputError):
        ui.entry.login(name)
    assert ui.bot.store.users.find(name) is None


def test_generation_failure_keeps_the_user_turn_and_warns(tmp_path: Path) -> None:
    model = ScriptedChatModel(replies=[GenerationError("server down")], responder=answer)
    ui = ChatUI(make_bot(tmp_path / "k.db", model), Worker(make_bot(tmp_path / "k.db", model)))
    state = login(ui, "민수")
    frames = say(ui, "안녕", state)[1]
    assert frames[-1].chat[-3] == {"role": "user", "content": "안녕"}  # then the notice: tests/test_page_flow.py
    assert frames[-1].chat[-2]["content"].startswith("⚠️ 답변을 받지 못했습니다")
    assert [t["role"] for t in ui.bot.store.turns.of_session(state.session.session_id)] == ["user"]
    say(ui, "다시 해 볼게", state)
    assert ui.bot.store.turns.of_session(state.session.session_id)[-1]["role"] == "assistant"


def test_end_session_answers_at_once_and_the_worker_commits_a_version(ui: ChatUI) -> None:
    ui.worker.start()
    state = login(ui, "민수")
    say(ui, "나 지난주에 부산으로 이사했어. 바다가 보여서 너무 좋아", state)
    started = time.perf_counter()
    out = ui.chat.end_session(state)
    assert time.perf_counter() - started < 0.5
    assert "대기 중" in out.progress and state.job_id is not None
    done = wait_job(ui, state)
    memory_md, changes_md = done.memory.text, done.changelog
    assert "현재 기억 v1" in memory_md and "부산" in memory_md
    assert "v1" in changes_md and "새로 기억함 1" in changes_md
    assert ui.bot.store.queue.get(ui.bot.store.queue.jobs(statuses=("done",))[0]["id"])["stage"] == "ok"
    # the next session starts from the new memory and the hits panel shows it
    ui.chat.new_session(state)
    frames = say(ui, "부산 생활 어때?", state)[1]
    assert "부산" in frames[-1].hits


def test_edit_delete_add_make_user_versions(ui: ChatUI) -> None:
    state = login(ui, "민수")
    ui.bot.engine.commit(
        state.user_id,
        [Sentence("사용자는 서울에 산다."), Sentence("사용자는 고양이를 키운다.")],
        base=None,
        strategy="import",
        status="ok",
        author="import",
    )
    ui.memory.edit_sentence("1:0", "사용자는 부산에 산다.", state)
    v2 = ui.bot.engine.current(state.user_id)
    assert v2.author == "user" and v2.texts == ["사용자는 부산에 산다.", "사용자는 고양이를 키운다."]
    assert version_diff(ui.bot.store.versions.get(state.user_id, 1), v2).rewritten == [
        ("사용자는 서울에 산다.", "사용자는 부산에 산다.")
    ]
    with pytest.warns(UserWarning, match="다시 불러왔으니"):  # another tab, still on version 1
        stale = ui.memory.edit_sentence("1:0", "사용자는 대구에 산다.", state)
    assert ui.bot.engine.current(state.user_id).number == 2  # refused: that sentence changed since
    assert "부산" in stale.memory.text and stale.memory.number == 2 and len(stale.memory.rows) == 2  # rows 2:0, 2:1
    for forged in ("x:y", "2:99", "2:-1", ":", "7:0"):
        with pytest.raises(InputError):
            ui.memory.delete_sentence(forged, state)
    ui.memory.delete_sentence("1:1", state)  # also version 1's list, but the cat is unchanged: it applies on top
    added = ui.memory.add_sentence("사용자는 수영을 배운다.", state)
    assert ui.bot.engine.current(state.user_id).texts == ["사용자는 부산에 산다.", "사용자는 수영을 배운다."]
    assert added.add_text == "" and added.memory.rows[-1].shown == "2\\. 사용자는 수영을 배운다\\."  # the box empties
    history = ui.memory.panel(state).history
    assert "직접 고쳤습니다" in history and "**더 이상 기억하지 않음**" in history and "**고쳐 씀**" in history
    ui.memory.delete_sentence("4:1", state)
    with pytest.raises(InputError) as last:  # the page shows its code's Korean message (chatbot/web/view.py warn)
        ui.memory.delete_sentence("5:0", state)
    assert last.value.code == "delete_last_sentence" and korean_error(last.value).startswith("마지막 남은 문장은")


def test_forget_needs_the_name_then_deletes_everything(ui: ChatUI) -> None:
    state = login(ui, "민수")
    say(ui, "안녕", state)
    with pytest.raises(InputError):
        ui.memory.forget("다른이름", state)
    out = ui.memory.forget("민수", state)
    assert out.state is None and out.login_box["visible"] is True and out.confirm == ""
    assert ui.bot.store.users.find("민수") is None
    assert ui.bot.store.queue.jobs() == []


def test_worker_ends_idle_sessions_and_recovers_after_a_crash(tmp_path: Path) -> None:
    now = [0.0]
    bot = make_bot(tmp_path / "k.db")
    worker = Worker(bot, idle_timeout_s=60, clock=lambda: now[0])
    ui = ChatUI(bot, worker)
    state = login(ui, "민수")
    say(ui, "안녕", state)
    now[0] = 30
    assert worker.end_idle() == []
    now[0] = 200
    assert worker.end_idle() == [state.session.session_id]
    assert bot.store.sessions.get(state.session.session_id)["end_reason"] == "idle"
    frames = say(ui, "다시 왔어", state)[1]  # a new session starts by itself
    assert frames[-1].chat[-1]["role"] == "assistant" and not state.session.ended
    # a "crash": the open session and a job left running are picked up by the next worker
    bot.store.queue.claim(owner=dead_owner())
    bot2 = make_bot(tmp_path / "k.db")
    worker2 = Worker(bot2, poll_s=0.05).start()
    try:
        deadline = time.monotonic() + 60  # a bound, not a speed test: the machine may be busy
        while bot2.store.queue.jobs(statuses=("pending", "running")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(bot2.store.queue.jobs(statuses=("done",))) == 2, bot2.store.queue.jobs()
        assert bot2.store.sessions.get(state.session.session_id)["end_reason"] == "restart"
    finally:
        worker2.stop(end_open=False)


def test_shutdown_ends_open_sessions_and_queues_their_updates(ui: ChatUI) -> None:
    state = login(ui, "민수")
    say(ui, "안녕", state)
    jobs = ui.worker.stop()
    assert len(jobs) == 1 and ui.bot.store.sessions.get(state.session.session_id)["end_reason"] == "shutdown"


def test_markdown_escaping_emotion_marks_and_banner(ui: ChatUI) -> None:
    assert "![x](http://evil)" not in md("![x](http://evil)")
    assert "<img" not in md("<img src=x onerror=alert(1)>")
    reply = shown({"role": "assistant", "content": "보세요 ![a](http://evil/x.png) <img src=http://evil/y> **굵게**"})
    assert "http://evil" not in reply["content"] and "**굵게**" in reply["content"]
    assert is_emotion("사용자는 시험에 떨어져서 속상했다.") and not is_emotion("사용자는 서울에 산다.")
    # a bare address is no autolink (its text would keep the backslashes: "127\.0\.0\.1")
    assert "http://" not in md("fake at http://127.0.0.1:8000/v1") and "www." not in md("www.evil.com")
    assert "임베더" in model_banner(ui.bot) and "ngram" in model_banner(ui.bot)


def test_memory_tab_shows_the_cue_words_stored_for_a_sentence(ui: ChatUI) -> None:
    """Cue words are data about the user too: the user sees them beside their sentence, escaped."""
    uid = ui.bot.store.users.get_or_create("민수")
    version = ui.bot.engine.commit(
        uid,
        [Sentence("사용자는 주말부부로 지낸다"), Sentence("사용자는 서울에 산다")],
        {"사용자는 주말부부로 지낸다": "KTX, 금요일 밤, <b>기차역</b>"},
        base=None,
        strategy="import",
        status="ok",
        author="import",
    )
    shown_memory = "\n\n".join(render_sentences(version, date.today()))
    assert "검색 단서: KTX, 금요일 밤" in shown_memory and "<b>" not in shown_memory
    assert shown_memory.count("검색 단서") == 1
    assert stage_text({"status": "running", "stage": "cues"}) == ("기억 갱신: 검색 단서 쓰는 중 …", False)


def test_a_loading_backend_answers_loading_then_serves(tmp_path: Path) -> None:
    import threading

    gate = threading.Event()
    bot = make_bot(tmp_path / "k.db")

    def load() -> tuple[Chatbot, Worker]:
        gate.wait(10)
        return bot, Worker(bot)

    ui = ChatUI(Backend.loading(load))
    assert "불러오는 중" in ui.entry.banner().banner
    with pytest.raises(KeemError, match="still loading") as loading:  # the page shows it in Korean (below)
        ui.entry.login("민수")
    assert loading.value.code == "models_loading" and korean_error(loading.value) == LOADING
    gate.set()
    ui.backend.done.wait(5)
    assert "임베더" in ui.entry.banner().banner
    assert login(ui, "민수").name == "민수"
    failing = ChatUI(Backend.loading(lambda: (_ for _ in ()).throw(RuntimeError("no weights"))))
    failing.backend.done.wait(5)
    assert "no weights" in failing.entry.banner().banner
    with pytest.raises(KeemError, match="no weights"):
        failing.entry.login("민수")


def test_chat_command_parses_the_same_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "KEEM_HOST", "KEEM_PORT"):
        monkeypatch.delenv(name, raising=False)
    parser = argparse.ArgumentParser()
    add_chat_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["chat", "--db", str(tmp_path / "x.db"), "--model", "demo", "--port", "7999", "--idle-timeout-min", "5"]
    )
    s = settings_from_args(args)
    assert (s.port, s.host, s.idle_timeout_min, s.model) == (7999, "127.0.0.1", 5.0, "demo")
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")  # what Hugging Face Spaces sets
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7860")
    spaces = settings_from_args(parser.parse_args(["chat", "--db", str(tmp_path / "x.db")]))
    assert (spaces.host, spaces.port) == ("0.0.0.0", 7860)
    assert settings_from_args(parser.parse_args(["chat", "--host", "127.0.0.1"])).host == "127.0.0.1"


def test_logins_come_from_the_auth_file_or_the_keem_auth_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Space cannot pass flags or hold a private file; its KEEM_AUTH secret carries the logins instead."""
    import argparse

    from chatbot.cli.chat import logins

    parser = argparse.ArgumentParser()
    add_chat_parser(parser.add_subparsers(dest="command"))
    monkeypatch.delenv("KEEM_AUTH", raising=False)
    assert logins(parser.parse_args(["chat"])) is None
    monkeypatch.setenv("KEEM_AUTH", "민수:pw-1, 영희:pw:2\n")
    assert logins(parser.parse_args(["chat"])) == [("민수", "pw-1"), ("영희", "pw:2")]
    users = tmp_path / "users.txt"
    users.write_text("# trial group A\n지우:pw-3\n", encoding="utf-8")
    assert logins(parser.parse_args(["chat", "--auth-file", str(users)])) == [("지우", "pw-3")]  # the flag wins
    monkeypatch.setenv("KEEM_AUTH", "민수")
    with pytest.raises(InputError, match="KEEM_AUTH line 1: expected name:password"):
        logins(parser.parse_args(["chat"]))


def seed_owner(url: str, app: gr.Blocks, bot: Chatbot, cookies: httpx.Cookies | None = None) -> int:
    """User one logs in through the app, says a secret, and gets a memory holding it."""
    owner = uuid.uuid4().hex
    call(url, dep_index(app, "login"), ["민수"], owner, cookies)
    user_id = bot.store.users.require("민수")
    call(url, dep_index(app, "send"), [SECRET, None], owner, cookies)
    call(url, dep_index(app, "respond"), [None], owner, cookies)
    bot.engine.commit(user_id, [Sentence(SECRET)], base=None, strategy="import", status="ok", author="import")
    return user_id


def sweep(
    url: str, app: gr.Blocks, session_hashes: list[str], payloads: list[Any], cookies: httpx.Cookies | None = None
) -> int:
    """Call every event (public or not) with each payload in every input; no answer may hold the secret.

    Returns how many calls ran to completion (so a sweep that was refused wholesale is noticed).
    """
    completed = 0
    client = httpx.Client(base_url=url, timeout=30, cookies=cookies)
    for index, dep in enumerate(app.config["dependencies"]):
        for session_hash in session_hashes:
            for value in payloads:
                messages = call(url, index, [value] * len(dep["inputs"]), session_hash, client=client)
                text = json.dumps(messages, ensure_ascii=False)
                assert "비밀번호" not in text and "나비" not in text, (dep.get("api_name"), value)
                completed += any(m.get("msg") == "process_completed" and m.get("success") for m in messages)
    client.close()
    return completed


def assert_owner_untouched(bot: Chatbot, user_id: int, versions: int) -> None:
    assert bot.engine.current(user_id).texts == [SECRET]
    assert len(bot.store.versions.of_user(user_id)) == versions
    assert any(t["text"] == SECRET for s in bot.store.sessions.all_open() for t in bot.store.turns.of_session(s["id"]))


def test_no_public_endpoint_and_strangers_reach_nothing_of_another_user(tmp_path: Path) -> None:
    from gradio_client import Client

    url, app, bot, worker = serve(tmp_path / "keem.db")
    try:
        user_id = seed_owner(url, app, bot)
        assert Client(url, verbose=False).view_api(print_info=False, return_format="dict")["named_endpoints"] == {}
        other = uuid.uuid4().hex
        call(url, dep_index(app, "login"), ["영희"], other)
        # without --auth-file the name is the credential, so only its holder may type it: everything else is swept
        assert sweep(url, app, [uuid.uuid4().hex, other], ["기억", "1:0", "2:0", None, "", 1, "영희"]) > 50
        assert_owner_untouched(bot, user_id, 1)
        assert bot.store.versions.of_user(bot.store.users.require("영희")) == []
    finally:
        app.close()
        worker.stop()


def test_the_app_takes_no_uploads(tmp_path: Path) -> None:
    """Issue 10: /gradio_api/upload took 50 MB from anyone and served it back, though the page has no upload."""
    import os

    from gradio.utils import get_upload_folder

    url, app, _bot, worker = serve(tmp_path / "keem.db")
    try:
        started = time.perf_counter()
        for name, size in (("big.bin", 3 * 1024 * 1024), ("tiny.txt", 5)):
            try:
                r = httpx.post(f"{url}gradio_api/upload", files={"files": (name, os.urandom(size))}, timeout=30)
                assert r.status_code == 403, (name, r.status_code, r.text)
            except httpx.TransportError:  # the server may answer and close before the body is sent: refused too
                pass
        assert time.perf_counter() - started < 10
        assert not [p for p in Path(get_upload_folder()).rglob("*") if p.name in ("big.bin", "tiny.txt")]
        assert app.max_file_size == 1024  # Gradio's other multipart routes are capped as well
        assert httpx.get(url).status_code == 200  # the page itself still serves
    finally:
        app.close()
        worker.stop()


def test_an_app_whose_page_is_slow_to_answer_its_first_look_still_launches(tmp_path: Path) -> None:
    """Gradio's launch looks at the page it has just started (HEAD /, a 3-s timeout) and, when that look timed out
    on a loaded machine, raised "a shareable link must be created": an app process exited 8 s after it had begun
    serving (seen in CI, under `keem serve` and alone). The look is off (launch_options); the app serves."""
    import asyncio

    from chatbot.web.app import launch_options

    looked: list[str] = []

    async def slow_first_look(request: fastapi.Request) -> None:
        if request.method == "HEAD" and not looked:
            looked.append(request.url.path)
            await asyncio.sleep(3.3)

    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot, poll_s=0.05).start()
    app = build_app(bot, worker)
    served = launch_options(app)["app_kwargs"]
    served["dependencies"].append(fastapi.Depends(slow_first_look))
    try:
        url = launch(app, app_kwargs=served)
        assert httpx.get(url + "config", timeout=30).status_code == 200
        assert httpx.head(url, timeout=30).status_code == 200  # the page itself, slow only the first time
    finally:
        app.close()
        worker.stop()


def test_with_auth_the_login_name_cannot_be_spoofed(tmp_path: Path) -> None:
    url, app, bot, worker = serve(tmp_path / "keem.db", auth=[("민수", "pw-1"), ("영희", "pw-2")])
    try:

        def cookies(name: str, password: str) -> httpx.Cookies:
            response = httpx.post(f"{url}login", data={"username": name, "password": password})
            assert response.status_code == 200, response.text
            return response.cookies

        user_id = seed_owner(url, app, bot, cookies("민수", "pw-1"))
        assert call(url, dep_index(app, "login"), ["민수"], uuid.uuid4().hex)[0]["msg"] == "refused"
        other = cookies("영희", "pw-2")
        assert sweep(url, app, [uuid.uuid4().hex], ["민수", "1:0", "2:0", None, ""], other) > 30
        assert_owner_untouched(bot, user_id, 1)
    finally:
        app.close()
        worker.stop()


def test_a_failed_update_is_retried_after_a_backoff_until_it_succeeds(tmp_path: Path) -> None:
    from memory import jobs as worker_module
    from models.errors import GenerationError

    now = [0.0]
    model = ScriptedChatModel(responder=lambda msgs: "사용자는 바다를 좋아한다.")
    bot = make_bot(tmp_path / "keem.db", model)
    worker = Worker(bot, clock=lambda: now[0])
    session = bot.start("민수")
    list(session.send("바다 보러 갔어"))
    job_id = worker.end(session)
    model.queue.appendleft(GenerationError("server went away"))  # the first update call fails
    assert worker.run_pending() == 1 and bot.store.queue.get(job_id)["status"] == "pending"
    assert worker.run_pending() == 0  # still backing off
    assert bot.store.queue.get(job_id)["next_attempt_at"] - time.time() > worker_module.RETRY_BASE_S - 5
    with bot.store.write():  # its time came
        bot.store.execute("update update_jobs set next_attempt_at = 0 where id = ?", [job_id])
    assert worker.run_pending() == 1 and bot.store.queue.get(job_id)["status"] == "done"


def test_a_failed_update_from_an_earlier_session_shows_its_error_and_a_retry_makes_it_memory(tmp_path: Path) -> None:
    down = [True]

    def flaky(messages: list[dict[str, Any]]) -> str:
        if down[0] and "요약으로 정리하세요" in messages[-1]["content"]:
            raise GenerationError("update server refused the connection")
        return answer(messages)

    bot = make_bot(tmp_path / "keem.db", ScriptedChatModel(responder=flaky))
    worker = Worker(bot, poll_s=0.05)
    ui = ChatUI(bot, worker)
    state = login(ui, "민수")
    say(ui, "어제 부산으로 이사했어", state)
    ui.chat.end_session(state)
    for _ in range(20):  # every retry fails until the job is given up (the backoff skipped)
        with bot.store.write():  # under the store's lock: the app's worker thread writes meanwhile
            bot.store.execute("update update_jobs set next_attempt_at = 0")
        worker.run_pending()
        if bot.store.queue.jobs(state.user_id, ("failed",)):
            break
    ui.entry.logout(state)

    again = login(ui, "민수")  # a later visit: the failure is on the memory tab with its error
    panel = ui.memory.panel(again)
    assert "실패했습니다" in panel.jobs and "update server refused the connection" in panel.jobs
    assert "이전 기억은 그대로" in panel.jobs and panel.retry["visible"] is True
    assert bot.store.versions.of_user(again.user_id) == []

    down[0] = False  # the model is back: the user's retry button turns the failed job into a version
    assert "다시 시도" in ui.memory.retry_failed(again).progress and again.job_id is not None
    worker.run_pending()
    done = wait_job(ui, again)
    assert "완료" in done.progress and "부산" in done.memory.text and done.jobs == ""
    assert done.retry["visible"] is False
    assert len(bot.store.versions.of_user(again.user_id)) == 1
    assert "없습니다" in ui.memory.retry_failed(again).progress  # nothing left to retry
    worker.stop()


def test_a_trial_participant_never_sees_their_strategy(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "k.db", strategy="balanced")
    ui = ChatUI(bot, Worker(bot))
    state = login(ui, "참가자1")
    assert state.session.strategy == "keem"
    bot.engine.commit(
        state.user_id, [Sentence("사용자는 고양이를 키운다")], base=None, strategy="keem", status="ok", author="updater"
    )
    ui.memory.add_sentence("사용자는 수영을 배운다.", state)  # the updater's v1 is in the history now
    panel = ui.memory.panel(state)
    shown = f"{panel.memory.text}{panel.changelog}{panel.history}{panel.jobs}"
    assert "keem" not in shown and "기억을 새로 썼습니다" in panel.history
    plain = make_bot(tmp_path / "k.db")  # nor does an operator's page (`keem memory history` names it)
    assert "방식" not in ChatUI(plain, Worker(plain)).memory.panel(state).history


def test_with_browser_identity_a_typed_name_opens_only_that_browsers_memory(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "k.db")
    ui = ChatUI(bot, Worker(bot), browser_identity=True)
    first = ui.entry.login("민수", "")
    state, key = first.state, first.key
    assert len(key) == 32 and state.name == "민수"
    bot.engine.commit(
        state.user_id,
        [Sentence("사용자는 부산으로 이사했다")],
        base=None,
        strategy="keem",
        status="ok",
        author="updater",
    )
    back = ui.entry.login("민수", key)  # the same browser, later
    assert back.state.user_id == state.user_id and back.key == key and "부산" in back.memory.text
    stranger = ui.entry.login("민수", "")  # another browser typing the same name
    assert stranger.state.user_id != state.user_id and stranger.key != key and "부산" not in stranger.memory.text
    forged = ui.entry.login("민수", "x' or 1=1")  # a malformed key is replaced, not used
    assert forged.state.user_id not in (state.user_id, stranger.state.user_id)
    assert bot.store.users.find("민수") is None  # no plain-name user to type into


def test_the_next_session_of_a_tab_keeps_its_user_whatever_the_identity(tmp_path: Path) -> None:
    """'새 대화 시작' (and a message after an ended session) opened the next session for the bare typed name, so a
    per-browser user's second session went to another user."""
    bot = make_bot(tmp_path / "k.db")
    ui = ChatUI(bot, Worker(bot), browser_identity=True)
    state = ui.entry.login("민수", "").state
    say(ui, "안녕", state)
    ui.chat.end_session(state)
    ui.chat.new_session(state)
    assert state.session.user_id == state.user_id and not state.session.ended
    ui.chat.end_session(state)
    say(ui, "다시 왔어", state)  # a message after the end opens the next session by itself
    assert state.session.user_id == state.user_id
    assert len(bot.store.users.all()) == 1  # "민수#<key>" only
    assert len(bot.store.sessions.of_user(state.user_id)) == 3


def test_browser_identity_is_on_for_a_public_space_without_logins(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatbot.cli.chat import browser_identity

    monkeypatch.delenv("SPACE_ID", raising=False)
    assert not browser_identity(Settings(), None)  # one's own machine: the name is enough
    monkeypatch.setenv("SPACE_ID", "someone/keem-chat")
    assert browser_identity(Settings(), None)
    assert not browser_identity(Settings(), [("민수", "pw")])  # logins are the identity
    assert not browser_identity(Settings(identity="name"), None)
    with pytest.raises(InputError, match="KEEM_IDENTITY"):
        browser_identity(Settings(identity="cookie"), None)


def test_a_full_disk_keeps_the_typed_message_in_the_box_and_end_session_tells_the_truth(tmp_path: Path) -> None:
    from tests.conftest import fill, tmpfs

    with tmpfs(tmp_path / "disk", "2m") as disk:
        bot = make_bot(disk / "keem.db")
        ui = ChatUI(bot, Worker(bot))
        state = login(ui, "민수")
        sent, _ = say(ui, "오늘 부산에 왔어", state)
        assert sent.message == ""  # stored, so the box clears
        fill(disk)
        with pytest.warns(UserWarning, match="저장 공간이 가득 찼습니다"):
            sent = ui.chat.send("내일은 제주도에 가", state)
        assert sent.message is KEEP  # not stored: the box keeps the text
        assert [t["text"] for t in bot.store.turns.of_session(state.session.session_id) if t["role"] == "user"] == [
            "오늘 부산에 왔어"
        ]
        out = ui.chat.end_session(state, "내일은 제주도에 가")
        assert "끝내지 못했습니다" in out.progress and "가득 찼습니다" in out.progress and not state.session.ended
        (disk / "filler").unlink()
        out = ui.chat.end_session(state, "")
        assert "기억 갱신" in out.progress and state.session.ended  # with room again, it ends and queues
        assert [t["role"] for t in bot.store.turns.of_session(state.session.session_id)] == ["user", "assistant"]
        bot.store.close()
