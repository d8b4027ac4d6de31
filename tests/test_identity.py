"""Identity is never reused, and every event of a tab re-checks who it acts for (issue 18, item 1): the migration
that makes ids AUTOINCREMENT, the forget counter that invalidates caches in every process, and two tabs of one user
when one forgets (from the page, or `keem memory forget` in another process) while a new visitor chats."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pytest
from sqlite_utils import Database

from chatbot.study_records import records
from chatbot.study_records import schema as trial_schema
from chatbot.web.app import build_app
from chatbot.web.chat import ChatUI
from chatbot.web.flow import Flow
from chatbot.web.opening import Opening
from chatbot.web.state import UserState
from chatbot.web.view import FORGOTTEN, PageView, wired
from chatbot.worker import Worker
from memory.engine import MemoryEngine
from memory.store import Sentence, Store
from memory.store.migrations import schema as memory_schema
from models.embedders import NgramEmbedder
from models.errors import UserForgottenError
from models.fake import ScriptedChatModel, stage_of
from tests.helpers import answer, make_bot, run_async, say

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("users", "sessions", "turns", "memory_versions", "memory_sentences", "update_jobs", "consents", "answers")
A_SECRET = "userA는 고양이 나비를 키운다"
B_SECRET = "userB의 비밀번호 힌트는 파란 우산이다"


# -- the migration --------------------------------------------------------------------------------
def old_database(path: Path) -> Database:
    """A database as the code before this change made it (memory m001..m004, trials t001), with data, and rows at
    the top of some tables deleted (their ids freed), one of them still named by another table."""
    db = Database(path)
    db.execute("PRAGMA foreign_keys=ON")
    memory_schema.migrations.apply(db, stop_before="m006_ids_never_reused")
    trial_schema.migrations.apply(db, stop_before="t002_ids_never_reused")
    t = "2026-11-01T00:00:00+00:00"
    with db.conn:
        for uid, name in ((1, "a"), (2, "b"), (3, "c")):
            db["users"].insert({"id": uid, "name": name, "created_at": t})
        for sid, uid in ((1, 1), (2, 2), (3, 2), (4, 3)):
            db["sessions"].insert({"id": sid, "user_id": uid, "started_at": t, "status": "ended"})
            db["turns"].insert_all(
                {"session_id": sid, "user_id": uid, "role": r, "text": f"{r} {sid}", "created_at": t}
                for r in ("user", "assistant")
            )
        for vid, uid, number, sid in ((1, 1, 1, 1), (2, 2, 1, 2), (3, 2, 2, 9)):  # v3 names session 9, gone
            db["memory_versions"].insert(
                {"id": vid, "user_id": uid, "number": number, "session_id": sid, "strategy": "keem"}
                | {"status": "ok", "author": "updater", "created_at": t}
            )
            db["memory_sentences"].insert_all(
                {"version_id": vid, "user_id": uid, "position": i, "text": f"v{vid} s{i}", "provenance": "added"}
                | {"embedding": bytes([vid, i]) * 8}
                for i in range(2)
            )
        db["update_jobs"].insert(
            {"user_id": 2, "session_id": 2, "strategy": "keem", "status": "done", "attempts": 1, "version_id": 2}
            | {"created_at": t}
        )
        db.execute("insert into consents (user_id, study_id, text_hash, created_at) values (2, 's', 'h', ?)", [t])
        db.execute(
            "insert into answers (session_id, user_id, study_id, item, kind, value, created_at) "
            "values (2, 2, 's', 'q', 'likert', '4', ?)",
            [t],
        )
        # user c (id 3) and their session 4 are forgotten, and a turn at the top of `turns` is deleted
        for table in ("turns", "sessions"):
            db.execute(f"delete from {table} where user_id = 3")
        db.execute("delete from users where id = 3")
        db.execute("delete from turns where id = (select max(id) from turns)")
    return db


# m014 renamed memory_versions.note to notes (codes; an empty note stays empty, as in these rows)
RENAMED = {("memory_versions", "notes"): "note"}


def snapshot(db: Database, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every row of every table, every index and every foreign key, as comparable values; with `like` (an earlier
    snapshot) only the columns and the indexed tables that one had (later migrations add columns of their own, e.g.
    m008's reply_to)."""
    tables = [t for t in TABLES if db[t].exists()]
    info = {t: [tuple(r) for r in db.execute(f"PRAGMA table_info({t})").fetchall()] for t in tables}
    selected = {t: {c[1]: c[1] for c in info[t]} for t in tables}  # shown name -> column
    if like is not None:
        for t in tables:  # a column a later migration renamed is compared under its old name
            info[t] = [(c[0], RENAMED.get((t, c[1]), c[1]), *c[2:]) for c in info[t]]
            selected[t] = {RENAMED.get((t, column), column): column for column in selected[t]}
        info = {t: [c for c in info[t] if c[1] in {old[1] for old in like["columns"][t]}] for t in tables}
    names = {t: ", ".join(f"{selected[t][c[1]]} as {c[1]}" for c in info[t]) for t in tables}
    indexes = sorted(tuple(r) for r in db.execute("select name, tbl_name, sql from sqlite_master where type = 'index'"))
    if like is not None:  # and only the tables that one had (later migrations add tables, e.g. m011's records)
        indexes = [i for i in indexes if i[1] in {old[1] for old in like["indexes"]}]
    return {
        "rows": {
            t: [tuple(r) for r in db.execute(f"select {names[t]} from {t} order by id").fetchall()] for t in tables
        },
        "indexes": indexes,
        "foreign_keys": {t: [tuple(r) for r in db.execute(f"PRAGMA foreign_key_list({t})").fetchall()] for t in tables},
        "columns": info,
    }


def test_the_migration_keeps_every_row_index_and_foreign_key_and_ids_are_never_reused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = old_database(path)
    before = snapshot(old)
    top = {t: old.execute(f"select max(id) from {t}").fetchone()[0] for t in TABLES}
    old.conn.close()

    store = Store(path)
    records(store)
    after = snapshot(store.db, like=before)
    assert after == before  # rows, indexes, foreign keys (with ON DELETE CASCADE) and columns, all kept
    assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    for table in TABLES:
        assert "AUTOINCREMENT" in store.db[table].schema, table
    seq = dict(store.db.execute("select name, seq from sqlite_sequence").fetchall())
    assert seq["sessions"] == 9  # above session 9, which no row holds but a version still names
    assert all(seq[t] >= top[t] for t in TABLES)
    # the documented limit: user c (id 3) left no trace, so the migration cannot know that id was ever given
    assert seq["users"] == 2

    uid = store.users.get_or_create("d")
    sid = store.sessions.start(uid, "keem", "fake")
    assert sid == 10
    store.users.delete(uid)
    assert store.users.get_or_create("e") == uid + 1  # from now on, never again
    # the cascade still reaches the trial tables through the rebuilt users table
    store.users.delete(2)
    assert store.db.execute("select count(*) from consents").fetchone()[0] == 0
    assert store.db.execute("select count(*) from answers").fetchone()[0] == 0
    store.close()
    again = Store(path)  # applied once: opening again changes nothing
    assert records(again) and memory_schema.applied(again.db) == memory_schema.names
    assert trial_schema.applied(again.db) == trial_schema.names
    again.close()


def test_the_rebuild_runs_again_harmlessly_after_a_crash_before_its_record(tmp_path: Path) -> None:
    """The migration commits, then the process dies before sqlite-utils records it: the next start runs it again."""
    path = tmp_path / "old.db"
    old_database(path).conn.close()
    Store(path).close()
    db = Database(path)
    db.execute("delete from _sqlite_migrations where name = 'm006_ids_never_reused'")
    db.conn.commit()
    db.conn.close()
    store = Store(path)
    assert store.one("select count(*) as n from turns")["n"] == 5
    assert store.one("select seq from sqlite_sequence where name = 'sessions'")["seq"] == 9
    store.close()


def fill_user(store: Store, name: str) -> dict[str, list[int]]:
    uid = store.users.get_or_create(name)
    sid = store.sessions.start(uid, "keem", "fake")
    turn = store.turns.add(sid, uid, "user", f"{name} 안녕")
    store.sessions.end(sid)
    job = store.queue.enqueue(uid, sid, "keem")
    version = store.versions.commit(
        uid, [Sentence(f"{name}의 기억")], base=None, strategy="keem", status="ok", author="user"
    )
    return {
        "users": [uid],
        "sessions": [sid],
        "turns": [turn],
        "jobs": [job],
        "versions": [version.id],
        "sentences": [s.id for s in version.sentences if s.id is not None],
    }


def test_a_forgotten_users_ids_never_come_back_even_from_another_connection(tmp_path: Path) -> None:
    app, cli = Store(tmp_path / "k.db"), Store(tmp_path / "k.db")
    a = fill_user(app, "userA")
    cli.users.delete(a["users"][0])  # another process's connection forgets userA
    b = fill_user(app, "userB")
    for kind in a:
        assert min(b[kind]) > max(a[kind]), kind
    app.close()
    cli.close()


def test_a_turn_for_a_forgotten_user_is_refused_in_the_same_transaction(tmp_path: Path) -> None:
    app, cli = Store(tmp_path / "k.db"), Store(tmp_path / "k.db")
    a = fill_user(app, "userA")
    uid, sid = a["users"][0], app.sessions.start(a["users"][0], "keem", "fake")
    cli.users.delete(uid)
    with pytest.raises(UserForgottenError) as refused:
        app.turns.add(sid, uid, "user", "아직 있니?")
    assert refused.value.code == "user_forgotten"
    b = app.users.get_or_create("userB")
    b_session = app.sessions.start(b, "keem", "fake")
    with pytest.raises(UserForgottenError):
        app.turns.add(b_session, uid, "user", "남의 대화에 끼워 넣기")  # a session that is not the user's
    assert app.rows("select * from turns") == []
    app.close()
    cli.close()


def test_the_engine_drops_a_user_forgotten_by_another_process_from_its_cache(tmp_path: Path) -> None:
    app, cli = Store(tmp_path / "k.db"), Store(tmp_path / "k.db")
    engine = MemoryEngine(app, NgramEmbedder())
    a = app.users.get_or_create("userA")
    engine.commit(a, [Sentence(A_SECRET)], base=None, strategy="user", status="ok", author="user")
    assert [h.text for h in engine.search(a, "고양이")] == [A_SECRET]
    assert engine.index.cached_users() == [a]

    cli.users.delete(a)  # `keem memory forget` in another process
    b = cli.users.get_or_create("userB")
    MemoryEngine(cli, NgramEmbedder()).commit(
        b, [Sentence(B_SECRET)], base=None, strategy="user", status="ok", author="user"
    )
    assert engine.search(a, "비밀번호 고양이") == []  # nothing of userB under userA's old id
    assert a not in engine.index.cached_users()  # and userA's text left this process's memory
    assert [h.text for h in engine.search(b, "우산")] == [B_SECRET]
    app.close()
    cli.close()


# -- two tabs of one user, through the real handlers ----------------------------------------------
@pytest.fixture
def ui(tmp_path: Path) -> Any:
    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot, poll_s=0.05)
    yield ChatUI(bot, worker)
    worker.stop()


def two_tabs(ui: ChatUI) -> tuple[UserState, UserState]:
    tab1, tab2 = ui.entry.login("userA").state, ui.entry.login("userA").state
    say(ui, "나 고양이 키워", tab1)
    say(ui, "이름은 나비야", tab2)
    ui.memory.add_sentence(A_SECRET, tab2)
    return tab1, tab2


def visitor_b(ui: ChatUI) -> UserState:
    b = ui.entry.login("userB").state
    say(ui, "내 비밀번호 힌트는 파란 우산이야", b)
    ui.memory.add_sentence(B_SECRET, b)
    return b


def assert_tab_was_told_and_nothing_crossed(ui: ChatUI, tab: UserState, a_id: int, b: UserState) -> None:
    store = ui.bot.store
    b_turns = [t["text"] for t in store.rows("select text from turns where user_id = ?", [b.user_id])]
    with pytest.warns(UserWarning, match="이 사용자의 데이터가 삭제되었습니다"):
        out = ui.chat.send("tab 2가 보내는 메시지", tab)
    assert out.state is None and out.login_box["visible"] is True and out.main_box["visible"] is False
    assert out.chat == [] and out.hits == "" and out.memory is None and out.history == ""
    shown = repr(out)
    assert "우산" not in shown and "userB" not in shown
    assert [t["text"] for t in store.rows("select text from turns where user_id = ?", [b.user_id])] == b_turns
    assert store.one("select count(*) as n from turns where text like 'tab 2%'")["n"] == 0
    assert b.user_id != a_id and not {s["id"] for s in store.sessions.of_user(b.user_id)} & {
        tab.session.session_id,
    }
    # every other event of the tab says the same, and stores nothing; a stream (a reply, the opening) says it once
    # and stops
    for event in (
        lambda: one(ui.chat.respond(tab)),
        lambda: one(Opening(ui.ctx, ui.chat).open(tab)),
        lambda: ui.chat.end_session(tab),
        lambda: ui.chat.new_session(tab),
        lambda: ui.memory.poll(tab),
        lambda: ui.memory.retry_failed(tab),
        lambda: ui.memory.add_sentence("끼워 넣기", tab),
        lambda: ui.memory.edit_sentence("1:0", "끼워 넣기", tab),
        lambda: ui.memory.delete_sentence("1:0", tab),
        lambda: ui.memory.forget("userA", tab),
        lambda: ui.entry.logout(tab),
    ):
        with pytest.warns(UserWarning, match="삭제되었습니다"):
            view = event()
        assert view.state is None and view.login_box["visible"] is True
    assert [v.texts for v in store.versions.of_user(b.user_id)] == [[B_SECRET]]
    assert store.one("select count(*) as n from turns where user_id = ?", [b.user_id])["n"] == len(b_turns)
    assert store.users.find("userA") is None


def test_a_tab_following_its_update_is_told_once_its_user_is_forgotten_and_stops_following(ui: ChatUI) -> None:
    """The page's watch of an update (Flow.watch) reads only the job while it is unchanged; the job goes with its
    forgotten user, and the next read shows the notice and the start screen, once, and ends the watch."""
    tab = ui.entry.login("userA").state
    say(ui, "나 고양이 키워", tab)
    ui.chat.end_session(tab)  # the worker is not started: the update waits
    assert tab.job_id is not None

    async def follow() -> list[PageView]:
        views = []
        async for view in Flow(ui).watch(tab):
            views.append(view)
            if len(views) == 1:  # another tab or process forgets userA while the update waits
                ui.bot.store.users.delete(tab.user_id)
        return views

    with pytest.warns(UserWarning, match="삭제되었습니다"):
        views = run_async(follow())
    assert len(views) == 2 and "기억 갱신" in views[0].progress
    assert views[-1].state is None and views[-1].login_box["visible"] is True and tab.job_id is None


def one(stream: Iterator[PageView]) -> PageView:
    """A stream's only frame."""
    frames = list(stream)
    assert len(frames) == 1, frames
    return frames[0]


def test_tab_2_of_a_user_forgotten_in_tab_1_is_told_and_sees_nothing_of_the_next_user(ui: ChatUI) -> None:
    tab1, tab2 = two_tabs(ui)
    a_id = tab1.user_id
    ui.memory.forget("userA", tab1)
    b = visitor_b(ui)
    assert_tab_was_told_and_nothing_crossed(ui, tab2, a_id, b)


def test_tab_of_a_user_forgotten_by_the_cli_in_another_process_is_told(ui: ChatUI, tmp_path: Path) -> None:
    tab1, tab2 = two_tabs(ui)
    a_id = tab1.user_id
    ui.bot.engine.search(a_id, "고양이")  # userA's index is in the app's cache
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "KEEM_BACKUP_DIR": ""}
    done = subprocess.run(
        [sys.executable, "-m", "chatbot.cli.main", "memory", "forget", "--user", "userA", "--yes"]
        + ["--db", str(tmp_path / "keem.db")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    b = visitor_b(ui)  # the app's engine sees the forget through the store's counter
    assert a_id not in ui.bot.engine.index.cached_users()
    assert_tab_was_told_and_nothing_crossed(ui, tab2, a_id, b)
    # the worker stops watching the forgotten sessions: nothing is ended or queued for them
    ui.worker.end_idle()
    assert ui.bot.store.queue.jobs(a_id) == []


def test_the_page_wiring_returns_a_forgotten_users_tab_to_the_start_screen(tmp_path: Path) -> None:
    """Through the Gradio event itself: the send event outputs the start screen's parts, and a forget that lands
    between the check and the store (another process) still ends in the notice, not a stack trace."""
    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot, poll_s=0.05)
    app = build_app(bot, worker)
    ui: ChatUI = app.keem_ui  # type: ignore[attr-defined]
    tab = ui.entry.login("userA").state
    by_name = {fn.fn.__name__: fn for fn in app.fns.values() if fn.fn is not None}
    ids = {id(block): getattr(block, "elem_id", None) for block in app.blocks.values()}
    Store(tmp_path / "keem.db").users.delete(tab.user_id)
    with pytest.warns(UserWarning, match="삭제되었습니다"):
        out = by_name["send"].fn("안녕", tab)
    shown = {ids[id(c)] or type(c).__name__: v for c, v in out.items()}
    assert shown["login"]["visible"] is True and shown["main"]["visible"] is False and shown["State"] is None
    worker.stop()


def test_a_forget_that_lands_while_an_event_runs_still_ends_in_the_notice() -> None:
    """Between the tab's check and the store's insert another process forgets the user: the store refuses
    (UserForgottenError) and the wiring shows the notice and the start screen, not an error toast."""

    def raced(text: str) -> PageView:
        raise UserForgottenError("user 1 (session 1) was deleted meanwhile")

    with gr.Blocks():
        outputs = {name: gr.Markdown() for name in FORGOTTEN}
    with pytest.warns(UserWarning, match="이 사용자의 데이터가 삭제되었습니다"):
        out = wired(raced, outputs)("x")
    assert out[outputs["state"]] is None and out[outputs["login_box"]]["visible"] is True


def test_an_update_running_while_its_user_is_forgotten_makes_no_version_for_anyone(tmp_path: Path) -> None:
    """The worker runs userA's update; mid-way another process forgets userA and userB arrives: the commit finds no
    userA (ids are never reused, so not userB either), no version is made, and the worker goes on."""
    started, release = threading.Event(), threading.Event()

    def gated(messages: list[dict[str, Any]]) -> str:
        if stage_of(messages[-1]["content"]) == "summarize":
            started.set()
            release.wait(20)
        return answer(messages)

    bot = make_bot(tmp_path / "keem.db", ScriptedChatModel(responder=gated))
    worker = Worker(bot, poll_s=0.05)
    ui = ChatUI(bot, worker)
    tab = ui.entry.login("userA").state
    say(ui, "나 고양이 나비 키워", tab)
    assert ui.chat.end_session(tab).state.job_id is not None
    ran: list[int] = []
    runner = threading.Thread(target=lambda: ran.append(worker.run_pending()))
    runner.start()
    assert started.wait(20)
    Store(tmp_path / "keem.db").users.delete(tab.user_id)  # `keem memory forget` in another process
    b = ui.entry.login("userB").state
    release.set()
    runner.join(30)
    assert ran == [1]  # the run ended without an error escaping the worker
    assert bot.store.rows("select * from memory_versions") == [] and bot.store.queue.jobs() == []
    assert b.user_id != tab.user_id and bot.engine.search(b.user_id, "고양이") == []
    worker.stop()


def test_every_event_of_a_tab_can_return_it_to_the_start_screen_and_spins_only_on_its_own_parts(
    tmp_path: Path,
) -> None:
    """Every event that takes the tab's state also outputs the start screen's parts (so a forgotten user's tab can
    go there), while its progress animation stays on the parts it was about (a reply spins on the chat, not on the
    memory tab or the hidden login box). A stream (a reply, the opening) too, with nothing chained after it to tell
    a forgotten user's tab: its frames leave the start screen's parts as they are, at no cost (blocks.py)."""
    app = build_app(make_bot(tmp_path / "keem.db"))
    components = {c["id"]: c for c in app.config["components"]}
    by_elem = {c.get("props", {}).get("elem_id"): i for i, c in components.items()}
    state = next(i for i, c in components.items() if c["type"] == "state")
    guarded = [d for d in app.config["dependencies"] if state in d["inputs"]]
    assert {"send", "respond", "open", "end_session", "new_session", "watch", "forget", "logout"} <= {
        d["api_name"] for d in guarded
    }
    start_screen = {by_elem["login"], by_elem["main"], by_elem["memory-jobs"], state}
    streams = [d for d in guarded if d["api_name"].startswith(("respond", "open"))]
    assert len(streams) == 5  # after sending, 다시 생성 and 다시 보내기; the opening after a login or 새 대화
    for dep in guarded:
        assert start_screen <= set(dep["outputs"]), dep["api_name"]
    for dep in streams:
        assert [d["api_name"] for d in app.config["dependencies"] if d["trigger_after"] == dep["id"]] == []
    respond = next(d for d in guarded if d["api_name"] == "respond")
    assert set(respond["show_progress_on"]) == {by_elem["chat"], by_elem["hits"], by_elem["pending-note"]}
