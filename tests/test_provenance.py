"""Memory a person can understand (issue 22): where each sentence came from, what an update changed and why, and
undo; a scripted two-session user through the real job runner, guard and store."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from chatbot.localtime import KOREA, local_time
from chatbot.web.why import render_why
from memory.changelog import changed_parts, changelog
from memory.emotion_words import emotion_parts
from memory.engine import MemoryEngine
from memory.jobs import JobRunner
from memory.provenance import explain, explain_all
from memory.store import Sentence, Store
from memory.undo import dropped_sentence, restore, revert
from memory.updaters import make_updater
from models.embedders import NgramEmbedder
from models.fake import ScriptedChatModel, stage_of
from tests.provenance_world import (
    BUSAN,
    CAT,
    MOVED,
    PEANUT,
    PHONE,
    PIANO,
    QUIT,
    SEOUL,
    SESSION1,
    SESSION2,
    SMOKE,
    SUMMARIES,
    _section,
    session,
    world,
)


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


def two_sessions(engine: MemoryEngine, name: str = "민수", strategy: str = "keem") -> int:
    """A user with two sessions, each updated by the job runner; returns the user id."""
    store = engine.store
    uid = store.users.get_or_create(name)
    runner = JobRunner(engine, lambda s: make_updater(s, ScriptedChatModel(responder=world), engine.embedder))
    for turns in (SESSION1, SESSION2):
        assert runner.run(session(store, uid, turns, strategy)) is not None
    return uid


@pytest.fixture
def minsu(engine: MemoryEngine) -> int:
    return two_sessions(engine)


def test_every_sentence_of_version_2_names_its_sources(engine, store, minsu):
    v2 = store.versions.get(minsu, 2)
    assert v2.texts == [MOVED, CAT, QUIT, PIANO, PEANUT]
    why = {w.text: w for w in explain_all(store, v2)}
    for w in why.values():  # every sentence: the session it comes from and the user's words behind it
        assert w.step and w.sessions and w.quotes, w
    dates = {s["id"]: s["started_at"] for s in store.sessions.of_user(minsu)}  # stored; front ends show them local
    first, second = sorted(dates)
    # new in session 2: quotes the user turn that said it, with its time
    piano = why[PIANO]
    assert piano.step == "rewrite" and piano.kind == "added" and piano.sessions == [dates[second]]
    assert piano.quotes[0].text == SESSION2[2] and piano.quotes[0].at.startswith(dates[second])
    assert all(0 < q.score <= 1 for q in piano.quotes)
    assert [q.text for q in why[QUIT].quotes] == [SESSION2[1]]  # "시작" alone is no support
    # rewritten: names the old sentence it continues, and the turn behind what is new in it (부산, 이사)
    moved = why[MOVED]
    assert moved.kind == "rewritten" and moved.continues == [SEOUL] and moved.quotes[0].text == SESSION2[0]
    assert moved.sessions == sorted({dates[first], dates[second]})
    # carried unchanged from session 1 (kept, or restored by the guard): session 1's sources, carried
    assert why[CAT].kind == "kept" and why[CAT].quotes[0].text == SESSION1[1] and why[CAT].sessions == [dates[first]]
    assert why[PEANUT].kind == "restored" and why[PEANUT].quotes[0].text == SESSION1[3]
    assert v2.sentences[1].sources == store.versions.get(minsu, 1).sentences[1].sources


def test_emotion_and_cause_are_told_apart():
    parts = emotion_parts("사용자는 시험에 떨어져서 속상했다.")
    assert parts is not None and parts.emotion == ["속상했다"] and parts.cause == "시험에 떨어져서"
    parts = emotion_parts("사용자는 요즘 불안하다, 다음 주 면접 때문에")
    assert parts is not None and parts.emotion == ["불안하다"] and parts.cause == "다음 주 면접 때문에"
    assert emotion_parts(SEOUL) is None


def test_the_changelog_lists_a_justified_drop_and_a_guard_restore_with_their_reasons(engine, store, minsu):
    log = changelog(store, store.versions.get(minsu, 1), store.versions.get(minsu, 2))
    assert [e.text for e in log.of("added")] == [QUIT, PIANO]
    assert log.of("added")[1].quotes[0].text == SESSION2[2]
    (rewritten,) = log.of("rewritten")
    assert rewritten.old == SEOUL and rewritten.text == MOVED
    assert [p for p, changed in rewritten.changed if changed] == ["살다가 부산으로 이사했다."]
    (dropped,) = log.of("dropped")
    assert dropped.text == SMOKE and "금연" in dropped.reason and "더 이상 사실이 아니라고" in dropped.reason
    assert dropped.quotes[0].text == SESSION2[1]  # the user's own words behind the judge's pair
    assert dropped.sentence_id == store.versions.get(minsu, 1).sentences[2].id
    (restored,) = log.of("restored")
    assert restored.text == PEANUT and "바꿀 만한 말이 없어" in restored.reason
    assert [e.text for e in log.of("kept")] == [CAT]
    assert log.counts() == {"added": 2, "rewritten": 1, "dropped": 1, "restored": 1, "kept": 1}


def test_restoring_the_justified_drop_is_a_new_version_by_the_user(engine, store, minsu):
    (dropped,) = changelog(store, *store.versions.of_user(minsu)).of("dropped")
    smoke = dropped_sentence(engine, minsu, dropped.sentence_id or 0)
    v3 = restore(engine, minsu, smoke)
    assert v3.number == 3 and v3.author == "user" and v3.texts == [MOVED, CAT, QUIT, PIANO, PEANUT, SMOKE]
    assert store.versions.get(minsu, 2).texts == [MOVED, CAT, QUIT, PIANO, PEANUT]  # the update stays in history
    log = changelog(store, store.versions.get(minsu, 2), v3)
    assert [(e.kind, e.text) for e in log.entries if e.kind != "kept"] == [("added", SMOKE)]
    assert "되살린" in log.of("added")[0].reason
    back = explain(store, v3, 6)  # its sources came back with it: session 1's words
    assert back.step == "restore" and back.quotes[0].text == SESSION1[2]
    with pytest.raises(Exception, match="already"):
        restore(engine, minsu, smoke)


def test_reverting_an_update_brings_back_the_memory_before_it_and_search_agrees(engine, store):
    uid = store.users.get_or_create("지우")
    runner = JobRunner(engine, lambda s: make_updater(s, ScriptedChatModel(responder=world), engine.embedder))
    runner.run(session(store, uid, SESSION1))
    queries = ["부산 생활은 어때?", "담배 끊었어?", "나비 잘 있어?"]
    before = [[(h.text, round(h.score, 5)) for h in engine.search(uid, q, k=3)] for q in queries]
    runner.run(session(store, uid, SESSION2))
    v3 = revert(engine, uid, to=1, base=2)
    assert v3.texts == store.versions.get(uid, 1).texts and v3.author == "user" and v3.number == 3
    fresh = MemoryEngine(store, NgramEmbedder())  # another process: its index is built from the store
    for e in (engine, fresh):
        assert [[(h.text, round(h.score, 5)) for h in e.search(uid, q, k=3)] for q in queries] == before
    log = changelog(store, store.versions.get(uid, 2), v3)
    assert {e.text for e in log.of("dropped")} == {MOVED, QUIT, PIANO}
    assert {e.text for e in log.of("added")} == {SEOUL, SMOKE}
    assert all("되돌리" in e.reason for e in log.of("added") + log.of("dropped"))
    assert explain(store, v3, 1).quotes[0].text == SESSION1[0]  # sources come back with the sentences


def test_a_revert_on_a_stale_view_keeps_what_came_since_or_is_refused(engine, store, minsu):
    v2 = store.versions.get(minsu, 2)
    engine.commit(  # another tab edits the rewritten sentence after this tab showed v2
        minsu,
        [
            Sentence("사용자는 부산 해운대에 산다.", "user", v2.sentences[0].id),
            *[Sentence(s.text, "kept", s.id, sources=s.sources) for s in v2.sentences[1:]],
        ],
        base=2,
        strategy="user",
        status="ok",
        author="user",
    )
    from models.errors import MemoryChangedError

    with pytest.raises(MemoryChangedError):
        revert(engine, minsu, to=1, base=2)
    assert store.versions.latest(minsu).number == 3  # nothing written over the other tab's edit


def test_a_persons_sentences_record_when_they_were_written(engine, store):
    uid = store.users.get_or_create("하나")
    v1 = engine.commit(uid, [Sentence(SEOUL)], base=None, strategy="import", status="ok", author="import")
    assert v1.sentences[0].sources["step"] == "import" and v1.sentences[0].sources["at"]
    v2 = engine.commit(
        uid, [Sentence(MOVED, "user", v1.sentences[0].id)], base=1, strategy="user", status="ok", author="user"
    )
    w = explain(store, v2, 1)
    assert w.step == "user" and w.continues == [SEOUL] and w.written_at


def test_operations_and_accumulate_changelogs_give_their_own_reasons(engine, store):
    def ops(messages: list[dict[str, str]]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage == "summarize":
            return "\n".join(SUMMARIES[SESSION1[0]] if SESSION1[0] in prompt else [BUSAN, QUIT, PIANO, CAT])
        if stage == "operations":
            memory = _section(prompt, "기억:", "새 문장:")
            sentence = prompt.rsplit("새 문장:", 1)[-1]
            index = lambda text: next(i for i, line in enumerate(memory, 1) if text in line)  # noqa: E731
            if BUSAN in sentence:
                return f"REPLACE {index(SEOUL)}"
            if QUIT in sentence:
                return f"DELETE {index(SMOKE)}"
            return "PASS" if CAT in sentence else "APPEND"
        return ""

    uid = store.users.get_or_create("연주")
    runner = JobRunner(engine, lambda s: make_updater(s, ScriptedChatModel(responder=ops), engine.embedder))
    runner.run(session(store, uid, SESSION1, "operations"))
    runner.run(session(store, uid, [*SESSION2, "나비는 잘 지내."], "operations"))
    v1, v2 = store.versions.of_user(uid)
    assert [o["operation"] for o in v2.details["operations"]] == ["REPLACE", "DELETE", "APPEND", "PASS"], v2.details
    log = changelog(store, v1, v2)
    (rewritten,) = log.of("rewritten")
    assert (rewritten.old, rewritten.text) == (SEOUL, BUSAN) and rewritten.reason.endswith("(REPLACE)")
    (dropped,) = log.of("dropped")
    assert dropped.text == SMOKE and "(DELETE)" in dropped.reason and QUIT in dropped.reason
    assert log.of("added")[0].text == PIANO and log.of("added")[0].reason.endswith("(APPEND)")
    assert log.of("passed")[0].text == CAT and log.of("passed")[0].reason.endswith("(PASS)")
    blind = changelog(store, v1, v2, blind=True)  # a user trial: reasons in words, no operation names
    text = json.dumps(blind.as_json(), ensure_ascii=False)
    assert not re.search(r"PASS|APPEND|REPLACE|DELETE|operations|keem|accumulate", text)
    assert explain(store, v2, len(v2.sentences)).op == "APPEND"  # `keem memory why` names it
    # the page's 왜? says it in words, trial or not
    shown = render_why(explain(store, v2, len(v2.sentences)), local_time(KOREA))
    assert "APPEND" not in shown and "대화 요약의 한 문장을 기억에 반영한 문장" in shown

    uid = store.users.get_or_create("다은")
    runner.run(session(store, uid, SESSION1, "accumulate"))
    runner.run(session(store, uid, SESSION2, "accumulate"))
    v1, v2 = store.versions.of_user(uid)
    log = changelog(store, v1, v2)
    assert [e.text for e in log.of("added")] == [BUSAN, QUIT, PIANO] and not log.of("dropped")
    assert all(e.reason.endswith("(APPEND)") for e in log.of("added"))
    assert log.of("added")[2].quotes[0].text == SESSION2[2]


def test_changed_parts_mark_only_the_new_words():
    assert changed_parts(SEOUL, MOVED) == [("사용자는 서울 마포구에", False), ("살다가 부산으로 이사했다.", True)]


def test_sources_hold_ids_only_so_an_erased_sentence_or_turn_leaves_no_text(engine, store, minsu):
    rows = store.rows("select sources from memory_sentences where user_id = ? and sources is not null", [minsu])
    assert rows and all(PHONE not in r["sources"] and "피아노" not in r["sources"] for r in rows)
    engine.forget_sentence(minsu, PIANO)
    assert PHONE not in json.dumps([w.as_json() for w in explain_all(store, store.versions.latest(minsu))])


def export_lines(tmp_path: Path, store: Store) -> list[dict[str, Any]]:
    from chatbot.trials.export import export

    export(store, tmp_path / "out", local=local_time(KOREA))
    return [json.loads(line) for line in (tmp_path / "out" / "memory_versions.jsonl").read_text().splitlines()]


def test_exports_carry_provenance_and_changelog_scrubbed(engine, store, minsu, tmp_path):
    from chatbot.trials.pii import TAGS

    lines = export_lines(tmp_path, store)
    text = json.dumps(lines, ensure_ascii=False)
    assert PHONE not in text and "2741" not in text and TAGS["phone"] in text
    v2 = lines[1]
    why = {w["text"]: w for w in v2["provenance"]}
    assert why[PIANO]["quotes"][0]["text"] == f"요즘 피아노를 배우기 시작했어. 학원 번호는 {TAGS['phone']}이야."
    assert why[MOVED]["continues"] == [SEOUL]
    assert v2["changelog"]["counts"] == {"added": 2, "rewritten": 1, "dropped": 1, "restored": 1, "kept": 1}
    (dropped,) = [e for e in v2["changelog"]["entries"] if e["kind"] == "dropped"]
    assert dropped["text"] == SMOKE and "금연" in dropped["reason"]


def test_the_cli_prints_why_changes_and_undoes(engine, store, store_url, minsu, capsys, monkeypatch):
    from chatbot.cli.main import main

    monkeypatch.setenv("KEEM_DB", store_url)  # store.path hides a Postgres password
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")

    def run(*argv: str) -> tuple[int, str]:
        code = main(["memory", *argv, "--user", "민수"])
        return code, capsys.readouterr().out

    code, out = run("why", "4")
    assert code == 0 and PIANO in out and f'said: "{SESSION2[2]}"' in out
    code, out = run("why", "1", "--json")
    assert json.loads(out)["continues"] == [SEOUL]
    code, out = run("changes")
    assert "dropped (1): " + SMOKE in out and "restored: " + PEANUT in out and "[살다가 부산으로 이사했다.]" in out
    code, out = run("show", "--json")
    shown = json.loads(out)
    assert shown["sentences"][3]["why"]["quotes"][0]["text"] == SESSION2[2]
    assert shown["changes"]["counts"]["dropped"] == 1
    assert run("restore", "--sentence", "1")[0] == 0
    assert store.versions.latest(minsu).texts[-1] == SMOKE
    assert run("revert", "--to", "1")[0] == 0
    assert store.versions.latest(minsu).texts == store.versions.get(minsu, 1).texts
    assert main(["memory", "restore", "--user", "민수", "--sentence", "9"]) == 2
    assert "the latest update dropped 1 sentence" in capsys.readouterr().err


HOBBIES = [f"사용자는 {w}을 좋아한다." for w in "등산 낚시 요리 독서 수영 바둑 볼링 사진 자전거 캠핑".split()]


def test_a_scoped_rewrite_carries_the_untouched_part_and_a_fallback_says_why(engine, store):
    def scoped(messages: list[dict[str, str]]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage in ("summarize", "reflect"):
            return QUIT if "금연" in prompt else "\n".join(HOBBIES + [SMOKE])
        if stage == "update":
            previous = _section(prompt, "\n이전 기억:", "이번 요약:")
            return "\n".join([t for t in previous if t != SMOKE] + [QUIT])
        if stage == "guard":
            return "1: 예"
        return "통과"

    uid = store.users.get_or_create("보라")
    model = ScriptedChatModel(responder=scoped)
    runner = JobRunner(engine, lambda s: make_updater(s, model, engine.embedder, max_new_tokens=160))
    runner.run(session(store, uid, ["취미가 많아. 그리고 담배를 피워."]))
    runner.run(session(store, uid, ["나 금연 시작했어."]))
    v1, v2 = store.versions.of_user(uid)
    assert v2.details["scope"]["carried"] >= 5, v2.details.get("scope")
    log = changelog(store, v1, v2)
    assert len(log.of("carried")) == v2.details["scope"]["carried"]
    assert all("모델에 보내지 않고 그대로 옮겼어요" in e.reason for e in log.of("carried"))
    assert [e.text for e in log.of("dropped")] == [SMOKE] and [e.text for e in log.of("added")] == [QUIT]

    def objects(messages: list[dict[str, str]]) -> str:  # the verifier objects to every rewrite
        stage = stage_of(messages[-1]["content"])
        return "실패: 흡연 이야기가 빠졌습니다." if stage == "verify" else scoped(messages)

    uid = store.users.get_or_create("초롱")
    runner = JobRunner(engine, lambda s: make_updater(s, ScriptedChatModel(responder=objects), engine.embedder))
    runner.run(session(store, uid, ["취미가 많아. 그리고 담배를 피워."]))
    runner.run(session(store, uid, ["나 금연 시작했어."]))
    v1, v2 = store.versions.of_user(uid)
    assert v1.status == v2.status == "fallback"
    (fallback,) = changelog(store, v1, v2).of("fallback")
    assert "흡연 이야기가 빠졌습니다" in fallback.reason and "이전 기억을 모두 두고" in fallback.reason
    assert explain(store, v2, len(v2.sentences)).step == "fallback"


def test_the_memory_tab_undoes_for_its_own_user_only(tmp_path, monkeypatch):
    from chatbot.bot import Chatbot
    from chatbot.settings import Settings
    from chatbot.web.app import build_app
    from chatbot.web.undo_buttons import WhyTab

    model = ScriptedChatModel(responder=world)
    bot = Chatbot(Settings(db=str(tmp_path / "k.db")), chat_model=model, embedder=NgramEmbedder())
    minsu = two_sessions(bot.engine)
    other = two_sessions(bot.engine, "지우")
    ui = build_app(bot).keem_ui  # type: ignore[attr-defined]
    tab = ui.entry.login("민수").state
    view = ui.memory.panel(tab)
    assert "~~사용자는 담배를 피운다\\.~~" in view.changelog and "되살리기: " + SMOKE == view.restore[0]["value"]
    assert view.revert["visible"] and tab.shown_changes == {"version": 2, "drops": [dropped_id(bot.store, minsu)]}
    why = WhyTab(ui.memory.ctx)
    theirs = ui.entry.login("지우").state
    ui.memory.panel(theirs)
    theirs.shown_changes["drops"] = [dropped_id(bot.store, minsu)]  # another user's sentence id: refused
    with pytest.warns(UserWarning, match="지난 기억에 없는 문장"):
        why.restore(0, theirs)
    assert bot.store.versions.latest(other).number == 2 and bot.store.versions.latest(minsu).number == 2
    why.revert(tab)  # "이번 갱신 되돌리기": v3 = v1, made on the v2 the tab showed
    assert bot.store.versions.latest(minsu).texts == bot.store.versions.get(minsu, 1).texts
    assert tab.shown_changes["version"] == 3 and not ui.memory.panel(tab).revert["visible"]
    tab.shown_changes["drops"] = [dropped_id(bot.store, minsu)]  # a stale page: SMOKE came back with v1 already
    with pytest.warns(UserWarning, match="이미 지금 기억에 있는 문장"):
        why.restore(0, tab)
    assert bot.store.versions.latest(minsu).number == 3
    for n in range(4, 16):  # a long history: the panel folds the 10 versions before the latest, no more
        latest = bot.engine.current(minsu)
        mine = [Sentence(s.text, "kept", s.id, sources=s.sources) for s in latest.sentences]
        bot.engine.commit(minsu, [*mine, Sentence(f"사용자는 {n}번째 메모를 남겼다.", "user")], base=n - 1, **BY_USER)
    monkeypatch.setattr("chatbot.web.why.HISTORY_SHOWN", 10)  # a long history: changelogs for the 10 before
    view = ui.memory.panel(tab)
    assert "v15 · " in view.changelog and "v14 · " not in view.changelog  # the latest, open
    history = view.history  # the earlier ones, newest first, each folded with its own changelog
    assert history.index("v14 · ") < history.index("v5 · ") < history.index("v1 · ")
    assert 'id="version-5"' in history and 'id="version-4"' not in history and "v4까지는 제목만" in history
    assert "사용자는 5번째 메모를 남겼다" in history.split('id="version-5"')[1].split("</details>")[0]


BY_USER = {"strategy": "user", "status": "ok", "author": "user"}


def test_a_turn_that_shares_no_word_is_never_a_source():
    from memory.provenance import support

    turns = [{"id": 7, "role": "user", "text": SESSION2[1]}, {"id": 8, "role": "assistant", "text": PIANO}]
    assert support([PIANO], [[]], turns, NgramEmbedder()) == [[]]  # the cosine alone is not support
    assert [t for t, _ in support([QUIT], [[]], turns, NgramEmbedder())[0]] == [7]  # replies never are


def dropped_id(store: Store, uid: int) -> int:
    """The id of SMOKE in the user's first version (what the update dropped)."""
    return next(s.id for s in store.versions.get(uid, 1).sentences if s.text == SMOKE)  # type: ignore[return-value]


def test_why_names_the_feeling_the_sentence_holds_now_not_its_records_first_label():
    from memory.emotion_words import EmotionParts
    from memory.provenance import current_emotion

    anxious = EmotionParts(["불안"], "시험")
    relieved = current_emotion(anxious, "사용자는 시험을 잘 봐서 안도했다.")  # rewritten: relieved now
    assert relieved is not None and relieved.emotion == ["안도했다"] and relieved.cause == "시험을 잘 봐서"
    assert current_emotion(anxious, "사용자는 시험 때문에 불안하다.") is anxious  # still the recorded feeling
    assert current_emotion(anxious, "사용자는 시험이 끝났다.") is anxious  # no feeling word: the record says
    assert current_emotion(None, "사용자는 서울에 산다.") is None


def test_a_sentence_an_earlier_update_dropped_can_still_be_brought_back(tmp_path):
    """Issue 34 item 5: after another version, the drop of v2's update is still offered, and restoring it works."""
    from chatbot.bot import Chatbot
    from chatbot.settings import Settings
    from chatbot.web.app import build_app
    from chatbot.web.undo_buttons import WhyTab

    bot = Chatbot(
        Settings(db=str(tmp_path / "k.db")), chat_model=ScriptedChatModel(responder=world), embedder=NgramEmbedder()
    )
    minsu = two_sessions(bot.engine)
    latest = bot.engine.current(minsu)
    mine = [Sentence(s.text, "kept", s.id, sources=s.sources) for s in latest.sentences]
    bot.engine.commit(minsu, [*mine, Sentence("사용자는 수영을 배운다.", "user")], base=2, **BY_USER)  # v3
    ui = build_app(bot).keem_ui  # type: ignore[attr-defined]
    tab = ui.entry.login("민수").state
    view = ui.memory.panel(tab)
    assert view.restore[0]["visible"] and view.restore[0]["value"] == f"되살리기 (v2에서 빠짐): {SMOKE[:36]}"
    WhyTab(ui.memory.ctx).restore(0, tab)
    assert SMOKE in bot.store.versions.latest(minsu).texts and bot.store.versions.latest(minsu).number == 4
    assert not any(SMOKE in str(b.get("value")) for b in ui.memory.panel(tab).restore)  # back: no longer offered
