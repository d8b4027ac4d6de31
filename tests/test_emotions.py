"""Emotion-and-cause records (memory/emotions.py, the shared Steps.emotions step, m011) and the friend who asks first
(memory/followup.py, chatbot/opening.py): the rules in code, with fakes that behave like real models."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest

from chatbot.bot import Chatbot
from chatbot.localtime import KOREA, local_time
from chatbot.opening import due_opening, one_question, open_session
from chatbot.settings import Settings
from chatbot.web.view import PageView
from memory.emotions import find_quote, merge, parse_lines, resolve_date
from memory.followup import choose, due_records
from memory.store import EmotionRecord, Sentence
from memory.store.emotions import follow
from memory.updaters import STRATEGIES, UpdateInput, make_updater
from memory.updaters.steps import Steps
from models.embedders import NgramEmbedder
from models.errors import GenerationError, InputError
from models.fake import RealisticChatModel, ScriptedChatModel
from tests.emotion_oracle import EmotionOracle, fixture_users

DAY = date(2026, 12, 3)  # a Thursday
INTERVIEW = [{"role": "user", "text": "다음 주 화요일에 면접이라 떨려"}, {"role": "assistant", "text": "응원할게!"}]


def record(cause: str = "면접", status: str = "ongoing", **kw) -> EmotionRecord:
    base = dict(key=cause, emotion="떨림", cause=cause, status=status, first_seen="2026-12-03", last_seen="2026-12-03")
    return EmotionRecord(**{**base, **kw})


# -- reading answers --------------------------------------------------------------------------------------------
def test_lines_survive_preambles_think_blocks_bullets_fences_and_a_cut_last_line():
    answer = (
        "<think>먼저 감정을 찾아보자</think>\n네, 기록을 정리했습니다:\n```\n"
        "기록 | 감정 | 원인 | 상태 | 날짜 | 문장 | 근거\n"
        "1. 새 | 떨림 | 면접 | 진행 중 | 2026-12-08 | 2 | 다음 주 화요일에 면접이라 떨려\n"
        "- R1 | 걱정 | 어머니 병환 | 해소됨 | - | - | 엄마 다 나으셨어\n"
        "R9 | 걱정 | 없는 기록 | 해소 | - | - | 아무 말\n"
        "새 | 기쁨 | 승진 | 진행\n```"
    )
    lines = parse_lines(answer, shown=1)
    assert [(x.ref, x.emotion, x.status, x.sentence) for x in lines] == [
        (None, "떨림", "ongoing", 2),
        (0, "걱정", "resolved", None),
    ]


@pytest.mark.parametrize(
    "said, expected",
    [
        ("다음 주 화요일", date(2026, 12, 8)),
        ("화요일", date(2026, 12, 8)),
        ("이번 주 토요일", date(2026, 12, 5)),
        ("내일", date(2026, 12, 4)),
        ("3일 뒤", date(2026, 12, 6)),
        ("12월 20일", date(2026, 12, 20)),
        ("1월 5일", date(2027, 1, 5)),
        ("2026-12-08", date(2026, 12, 8)),
        ("-", None),
        ("언젠가", None),
    ],
)
def test_dates_resolve_against_the_session_date(said, expected):
    assert resolve_date(said, DAY) == expected


def test_a_quote_must_be_the_users_words_from_this_session():
    turns = ["다음 주 화요일에 면접이라 떨려"]
    assert find_quote("다음 주 화요일에 면접이라 떨려.", turns) == "다음 주 화요일에 면접이라 떨려."
    assert find_quote("다음주 화요일 면접이라 떨려", turns) == "다음 주 화요일에 면접이라 떨려"  # reworded a little
    assert find_quote("면접을 잘 봐서 후련하다", turns) is None  # not said
    assert find_quote("응", turns) is None  # too short to be evidence


# -- merging: evidence, dropped lines, failures ------------------------------------------------------------------
def test_a_status_changes_only_with_a_quote_from_this_session():
    old = [record(sentence="사용자는 면접 때문에 떨린다.")]
    memory = ["사용자는 면접 때문에 떨린다."]
    dialogue = [{"role": "user", "text": "면접 잘 봤어! 이제 좀 후련해"}]
    unquoted = "R1 | 안도 | 면접 | 해소 | - | 1 | 면접이 잘 끝났다고 함"
    records, report = merge(old, unquoted, memory, dialogue, date(2026, 12, 17), 7)
    assert records[0].status == "ongoing" and "without a quote" in report["refused"][0]
    quoted = "R1 | 안도 | 면접 | 해소 | - | 1 | 면접 잘 봤어! 이제 좀 후련해"
    records, report = merge(old, quoted, memory, dialogue, date(2026, 12, 17), 7)
    (r,) = records
    assert (r.status, r.ended, r.ended_at, r.last_session) == (
        "resolved",
        "면접 잘 봤어! 이제 좀 후련해",
        "2026-12-17",
        7,
    )
    assert r.quote == old[0].quote and r.first_seen == "2026-12-03"  # the record keeps where it began


def test_dropped_lines_keep_their_records_and_no_answer_keeps_them_all_and_says_so():
    old = [record("면접"), record("이사", emotion="불안")]
    dialogue = [{"role": "user", "text": "이사 갈 집 드디어 구했어"}]
    only_one = "R2 | 안도 | 이사 | 해소 | - | - | 이사 갈 집 드디어 구했어"
    records, _ = merge(old, only_one, [], dialogue, date(2026, 12, 10), None)
    assert [(r.cause, r.status) for r in records] == [("면접", "ongoing"), ("이사", "resolved")]
    records, report = merge(old, None, [], dialogue, date(2026, 12, 10), None)
    assert records == old and report["failed"] is True


def test_a_new_emotion_needs_the_users_words_and_a_repeated_line_makes_one_record():
    line = "새 | 떨림 | 면접 | 진행 중 | 다음 주 화요일 | 1 | 다음 주 화요일에 면접이라 떨려"
    invented = "새 | 슬픔 | 이별 | 진행 중 | - | - | 헤어져서 슬퍼"
    records, report = merge([], f"{line}\n{line}\n{invented}", ["사용자는 면접 때문에 떨린다."], INTERVIEW, DAY, 1)
    (r,) = records
    assert (r.emotion, r.cause, r.due, r.sentence, r.first_session) == (
        "떨림",
        "면접",
        "2026-12-08",
        "사용자는 면접 때문에 떨린다.",
        1,
    )
    assert report["refused"] == ["new 슬픔/이별: no quote from this session"]


def test_the_records_step_that_fails_keeps_the_previous_records_and_the_update_goes_on():
    steps = Steps(ask=lambda stage, prompt, budget: (_ for _ in ()).throw(GenerationError("429")))
    old = [record()]
    records, report = steps.emotions(old, [Sentence("사용자는 면접 때문에 떨린다.")], INTERVIEW, DAY)
    assert [r.cause for r in records] == ["면접"] and report["failed"]
    model = ScriptedChatModel(["사용자는 고양이를 키운다.", GenerationError("timed out")])
    inp = UpdateInput([], [{"role": "user", "text": "고양이 키워"}], DAY, records=old)
    result = make_updater("accumulate", model).update(inp, lambda stage: None)
    assert [s.text for s in result.sentences] == ["사용자는 고양이를 키운다."]
    assert result.records == old and [n.code for n in result.notes] == ["emotions_failed"]


def test_records_follow_their_sentence_through_a_rewrite():
    old = [record(sentence="사용자는 면접 때문에 떨린다.", sentence_id=11)]
    rewritten = [Sentence("사용자는 12월 8일 면접 때문에 떨린다.", "rewritten", origin_id=11)]
    assert follow(old, rewritten)[0].sentence == "사용자는 12월 8일 면접 때문에 떨린다."
    assert follow(old, [Sentence("사용자는 고양이를 키운다.", "added")])[0].sentence == ""  # gone: kept as history


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_gets_its_records_from_the_same_extraction(strategy):
    user = fixture_users()[0]
    model = RealisticChatModel(EmotionOracle(user), {"preamble": 0.5, "numbering": 0.5, "think": 0.5}, seed=3)
    inp = UpdateInput([], INTERVIEW, DAY, session_id=5)
    result = make_updater(strategy, model).update(inp, lambda stage: None)
    assert [(r.emotion, r.cause, r.status, r.due) for r in result.records or []] == [
        ("떨림", "면접", "ongoing", "2026-12-08")
    ]
    assert "emotions" in result.details


# -- what is due ------------------------------------------------------------------------------------------------
def test_due_is_ongoing_and_past_its_date_never_resolved_or_twice_in_a_row():
    today = date(2026, 12, 17)
    records = [
        record("면접", due="2026-12-08"),
        record("이사", emotion="불안"),
        record("시험", due="2026-12-20"),  # not yet
        record("치과", status="resolved", due="2026-12-04"),
        record("이혼", status="past"),
    ]
    assert [r.cause for r in due_records(records, today)] == ["면접", "이사"]
    assert choose(records, today).cause == "면접"
    assert choose(records, today, last_asked="면접").cause == "이사"
    assert choose(records[2:], today) is None


# -- the opening ------------------------------------------------------------------------------------------------
def pieces(text: str, size: int = 3):
    return iter([text[i : i + size] for i in range(0, len(text), size)])


@pytest.mark.parametrize(
    "written",
    [
        "면접은 어떻게 됐어? 떨렸을 텐데 잘 봤어?",
        "<think>면접을 물어보자</think>\n면접은 어떻게 됐어? 잘 봤어?",
        "네, 이렇게 물어볼게요:\n\n“면접은 어떻게 됐어?” 다른 말",
        "```\n면접은 어떻게 됐어?\n```",
    ],
)
def test_an_opening_is_one_question_whatever_the_model_wraps_it_in(written):
    assert "".join(one_question(pieces(written))).strip() == "면접은 어떻게 됐어?"


@pytest.fixture
def oracle_bot(store):
    def make(user: dict, **settings) -> Chatbot:
        model = RealisticChatModel(EmotionOracle(user), {"preamble": 0.3, "think": 0.3, "repeat": 0.3}, seed=1)
        return Chatbot(Settings(db=store.path, **settings), chat_model=model, embedder=NgramEmbedder(), store=store)

    return make


def run_session(bot: Chatbot, name: str, day: str, turns: list[str], strategy: str = "keem") -> tuple[str, int]:
    """One session on `day`: (the opening shown, the session id), with its memory update run."""
    session = bot.start(name, strategy=strategy)
    with bot.store.write():
        bot.store.db.execute(
            "update sessions set started_at = ? where id = ?", [f"{day}T10:00:00+00:00", session.session_id]
        )
    session.today = date.fromisoformat(day)
    opening = "".join(open_session(session))
    for text in turns:
        "".join(session.send(text))
    bot.run_update(session.end())
    return opening, session.session_id


def test_acceptance_the_interview_is_asked_about_two_weeks_later_and_never_after_it_went_well(oracle_bot, store):
    bot = oracle_bot(fixture_users()[0])
    opening, _ = run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    assert opening == ""  # nothing due before anything was said
    user_id = store.users.find("지수")
    (r,) = store.versions.emotions.latest(user_id)
    assert (r.emotion, r.cause, r.status, r.first_seen, r.due) == (
        "떨림",
        "면접",
        "ongoing",
        "2026-12-03",
        "2026-12-08",
    )
    assert r.sentence and r.quote == "다음 주 화요일에 면접이라 떨려"

    opening, second = run_session(bot, "지수", "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"])
    assert "면접" in opening and opening.count("?") == 1 and opening.endswith("?")
    turns = store.turns.of_session(second)
    assert (turns[0]["role"], turns[0]["text"]) == ("assistant", opening)  # stored as the first turn
    (r,) = store.versions.emotions.latest(user_id)
    assert (r.status, r.ended, r.ended_at) == ("resolved", "면접 잘 봤어! 이제 좀 후련해", "2026-12-17")

    opening, _ = run_session(bot, "지수", "2026-12-24", ["오늘은 그냥 집에서 쉬었어"])
    assert opening == ""


def test_the_korean_fixture_opens_with_what_is_due_for_ten_users(oracle_bot, store):
    """Each of the ten users' sessions opens about exactly the fixture's cause (or not at all), and the records
    hold the fixture's status after each session, through the real keem updater and a model with habits."""
    for user in fixture_users():
        bot = oracle_bot(user)
        for s in user["sessions"]:
            opening, _ = run_session(bot, user["name"], s["date"], [t["text"] for t in s["turns"]])
            where = f"{user['name']} {s['date']}"
            if s["opens_about"] is None:
                assert opening == "", where
            else:
                assert s["opens_about"] in opening and opening.count("?") == 1, where
            statuses = {r.cause: r.status for r in store.versions.emotions.latest(store.users.find(user["name"]))}
            for cause, status in s.get("records", {}).items():
                assert statuses.get(cause) == status, where


@pytest.mark.parametrize("strategy", ["accumulate", "operations"])
def test_the_baselines_resolve_and_open_the_same_way(oracle_bot, strategy):
    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"], strategy)
    opening, _ = run_session(bot, "지수", "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"], strategy)
    assert "면접" in opening
    opening, _ = run_session(bot, "지수", "2026-12-24", ["오늘은 그냥 집에서 쉬었어"], strategy)
    assert opening == ""


def test_openings_off_and_the_opening_prompt_never_names_the_strategy(oracle_bot, store):
    user = fixture_users()[0]
    off = oracle_bot(user, opening="off")
    run_session(off, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"], "operations")
    session = off.start("지수", strategy="operations")
    session.today = date(2026, 12, 17)
    assert due_opening(session) is None and "".join(open_session(session)) == ""
    on = oracle_bot(user)
    session = on.start("지수", strategy="operations")
    session.today = date(2026, 12, 17)
    "".join(open_session(session))
    prompt = json.dumps(on.chat_model.calls[-1]["messages"], ensure_ascii=False)
    assert "면접" in prompt and not any(name in prompt for name in (*STRATEGIES, "전략"))
    with pytest.raises(InputError, match="KEEM_OPENING"):
        Settings.load({"KEEM_OPENING": "always"})


def test_an_erased_sentence_takes_its_emotion_records(oracle_bot, store):
    user = fixture_users()[5]
    bot = oracle_bot(user)
    run_session(bot, user["name"], "2026-12-01", [t["text"] for t in user["sessions"][0]["turns"]])
    user_id = store.users.find(user["name"])
    records = store.versions.emotions.latest(user_id)
    assert sorted(r.cause for r in records) == ["이사 갈 집", "제주도 여행"]
    bot.forget_sentence(user_id, next(r.sentence for r in records if r.cause == "이사 갈 집"))
    assert [r.cause for r in store.versions.emotions.latest(user_id)] == ["제주도 여행"]
    rows = store.db.execute("select cause, quote from emotion_records").fetchall()
    assert rows and not any("이사" in cause or "이사" in quote for cause, quote in rows)
    details = store.db.execute("select details from memory_versions").fetchone()[0]
    report = json.loads(details)["emotions"]
    assert report["new"] == ["설렘/제주도 여행: ongoing"]  # the records step's report forgets the erased one
    assert "이사 갈 집" not in details


def test_a_users_edit_carries_the_records(oracle_bot, store):
    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    user_id = store.users.find("지수")
    latest = store.versions.latest(user_id)
    edited = [Sentence(s.text + " (확인함)", "user", origin_id=s.id) for s in latest.sentences]
    version = bot.engine.commit(user_id, edited, base=latest.number, strategy="edit", status="ok", author="user")
    (r,) = version.records
    assert r.cause == "면접" and r.sentence.endswith("(확인함)")


# -- blind trials, exports, the CLI -----------------------------------------------------------------------------
def test_a_blind_trials_openings_name_no_strategy_and_count_as_turns_in_the_export(oracle_bot, store, tmp_path):
    from chatbot.trials.export import export

    for strategy in ("keem", "accumulate"):
        bot = oracle_bot(fixture_users()[0])
        name = f"지수{strategy[0]}"
        run_session(bot, name, "2026-12-03", ["다음 주 화요일에 면접이라 떨려"], strategy)
        opening, _ = run_session(bot, name, "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"], strategy)
        assert "면접" in opening and not any(s in opening for s in (*STRATEGIES, "전략", "KEEM"))
    counts = export(store, tmp_path / "export", pseudonymize=True, local=local_time(KOREA))
    sessions = [json.loads(line) for line in open(tmp_path / "export" / "sessions.jsonl", encoding="utf-8")]
    first_turns = [s["turns"][0] for s in sessions if s["number"] == 2]
    assert len(first_turns) == 2 and all(t["role"] == "assistant" and "면접" in t["text"] for t in first_turns)
    assert counts["turns"] == sum(len(s["turns"]) for s in sessions) == 2 * (2 + 3)  # 2 + (opening + 2) each
    versions = [json.loads(line) for line in open(tmp_path / "export" / "memory_versions.jsonl", encoding="utf-8")]
    # each strategy's records, for the trial to compare: ongoing after the first session, resolved after the second
    statuses = [[(r["cause"], r["status"]) for r in v["emotions"]] for v in versions]
    assert statuses == [[("면접", "ongoing")], [("면접", "resolved")]] * 2


def test_a_study_plan_switches_openings_per_study():
    from chatbot.study import study_from_dict

    plan = {"id": "s1", "title": "연구", "sessions": 3, "consent": "동의서"}
    assert study_from_dict(plan).opening is None  # KEEM_OPENING decides
    assert study_from_dict({**plan, "opening": "off"}).opening == "off"
    with pytest.raises(InputError, match="opening"):
        study_from_dict({**plan, "opening": "sometimes"})


def test_keem_memory_emotions_shows_emotion_cause_since_status_and_the_quote(oracle_bot, store, monkeypatch, capsys):
    from chatbot.cli.main import main

    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    run_session(bot, "지수", "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"])
    monkeypatch.setenv("KEEM_DB", str(store.path))
    assert main(["memory", "emotions", "--user", "지수"]) == 0
    out = capsys.readouterr().out
    assert "떨림 | 면접 | since 2026-12-03 | resolved" in out and '"다음 주 화요일에 면접이라 떨려"' in out
    assert 'ended 2026-12-17: "면접 잘 봤어! 이제 좀 후련해"' in out
    assert main(["memory", "emotions", "--user", "지수", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert (r["emotion"], r["cause"], r["since"], r["status"], r["quote"]) == (
        "떨림",
        "면접",
        "2026-12-03",
        "resolved",
        "다음 주 화요일에 면접이라 떨려",
    )


def test_the_timeline_shows_each_emotion_newest_first_with_its_words():
    from chatbot.web.emotions import EMPTY, render_timeline

    records = [
        record("면접", status="resolved", quote="면접이라 떨려", ended="잘 봤어", ended_at="2026-12-17"),
        record(
            "이사", emotion="불안", first_seen="2026-12-10", last_seen="2026-12-10", quote="집을 못 구해서 <b>불안</b>"
        ),
    ]
    text = render_timeline(records)
    assert text.index("불안") < text.index("떨림")  # newest first
    assert "2026-12-03부터 · 해소" in text and "끝 (2026-12-17): “잘 봤어”" in text and "말: “면접이라 떨려”" in text
    assert "<b>" not in text  # the user's words are escaped
    assert render_timeline([]) == EMPTY


def test_the_page_streams_the_opening_into_the_chat_after_login(oracle_bot, store):
    from chatbot.web.chat import ChatUI
    from chatbot.web.opening import Opening
    from chatbot.worker import Worker

    bot = oracle_bot(fixture_users()[0])
    three_weeks_ago = (date.today() - timedelta(days=21)).isoformat()
    run_session(bot, "지수", three_weeks_ago, ["다음 주 화요일에 면접이라 떨려"])  # the interview is 1-2 weeks past
    ui = ChatUI(bot, Worker(bot))
    opening = Opening(ui.ctx, ui.chat)
    state = ui.entry.login("지수").state
    frames = list(opening.open(state))
    chats = [f.chat for f in frames if isinstance(f.chat, list)]
    (shown,) = chats[-1]
    assert frames[0].stop["visible"] and not frames[0].regenerate["visible"]  # 멈추기 while the question streams
    last = [f for f in frames if isinstance(f.stop, dict)][-1]
    assert not last.stop["visible"] and not last.regenerate["visible"]  # the question answers no message
    assert shown["role"] == "assistant" and "면접" in shown["content"] and shown["content"].endswith("?")
    assert [t["role"] for t in store.turns.of_session(state.session.session_id)] == ["assistant"]
    assert [f.chat for f in opening.open(state)] == [PageView().chat]  # once per session: nothing more
    sent = ui.chat.send("응 잘 봤어", state)
    assert sent.chat[0] == shown  # the conversation goes on below it


def test_forgetting_the_user_leaves_no_emotion_record_or_opening(oracle_bot, store):
    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    run_session(bot, "지수", "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"])
    assert store.db.execute("select count(*) from session_openings").fetchone()[0] == 1
    bot.forget(store.users.find("지수"))
    for table in ("emotion_records", "session_openings"):
        assert store.db.execute(f"select count(*) from {table}").fetchone()[0] == 0


def test_a_message_typed_while_the_opening_streams_reads_after_it(oracle_bot, store):
    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    session = bot.start("지수")
    session.today = date(2026, 12, 17)
    stream = open_session(session)
    first = next(stream)
    session.record("응 잘 봤어!", queued=True)  # stored now, while the opening streams
    opening = first + "".join(stream)
    assert [(t["role"], t["text"]) for t in store.turns.of_session(session.session_id)] == [
        ("assistant", opening),
        ("user", "응 잘 봤어!"),
    ]


def test_after_an_opening_the_chat_prompt_still_starts_with_a_user_turn(oracle_bot):
    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    session = bot.start("지수")
    session.today = date(2026, 12, 17)
    opening = "".join(open_session(session))
    "".join(session.send("응 잘 봤어!"))
    roles = [(m["role"], m["content"]) for m in bot.chat_model.calls[-1]["messages"][1:]]
    assert roles[:2] == [("user", "(대화 시작)"), ("assistant", opening)] and roles[2][0] == "user"


def test_reverting_an_update_brings_back_the_records_as_they_were(oracle_bot, store):
    """ "이번 갱신 되돌리기" undoes the update's records too: an interview the update marked resolved is ongoing
    again, and due again for the next opening."""
    from memory.undo import revert

    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    run_session(bot, "지수", "2026-12-17", ["면접 잘 봤어! 이제 좀 후련해"])
    user_id = store.users.find("지수")
    assert [r.status for r in store.versions.emotions.latest(user_id)] == ["resolved"]
    latest = store.versions.latest(user_id)
    version = revert(bot.engine, user_id, to=latest.number - 1, base=latest.number)
    (r,) = version.records
    assert (r.status, r.cause, r.ended) == ("ongoing", "면접", None) and r.sentence in [
        s.text for s in version.sentences
    ]
    assert choose(version.records, date(2026, 12, 24)) is not None


def test_why_and_the_memory_tab_take_the_emotion_and_cause_from_the_record(oracle_bot, store):
    """A sentence's "왜?" names the record's emotion and cause (the model's reading, backed by the user's words) for the
    sentence it belongs to, and the memory tab marks that sentence, whatever its surface words."""
    from chatbot.web.render import render_sentences
    from memory.provenance import explain_all

    bot = oracle_bot(fixture_users()[0])
    run_session(bot, "지수", "2026-12-03", ["다음 주 화요일에 면접이라 떨려"])
    version = store.versions.latest(store.users.find("지수"))
    (r,) = version.records
    (why,) = [w for w in explain_all(store, version) if w.text == r.sentence]
    assert why.emotion is not None and (why.emotion.emotion, why.emotion.cause) == (["떨림"], "면접")
    line = next(line for line in render_sentences(version, date.today()) if "면접" in line)
    assert "감정·원인" in line


def test_a_dated_plan_without_a_feeling_is_followed_up_after_its_date_and_not_marked_as_an_emotion():
    """ "20일에 동생이랑 제주도 가" says no feeling, but a friend asks how the trip was: the records step keeps dated
    plans as "계획" records, due once the date has passed; the memory tab does not mark its sentence 감정·원인 and the
    opening prompt names it a plan."""
    from chatbot.opening import messages
    from chatbot.web.render import render_sentences
    from memory.emotions import PLAN
    from memory.store import Version

    said = [{"role": "user", "text": "20일에 동생이랑 제주도 가"}]
    sentence = "사용자는 12월 20일에 동생과 제주도 여행을 간다."
    line = f"새 | {PLAN} | 동생과 제주도 여행 | 진행 중 | 2026-12-20 | 1 | 20일에 동생이랑 제주도 가"
    (plan,), _ = merge([], line, [sentence], said, DAY, 1)
    assert (plan.emotion, plan.due, plan.status) == (PLAN, "2026-12-20", "ongoing")
    assert choose([plan], date(2026, 12, 15)) is None and choose([plan], date(2026, 12, 21)) == plan
    version = Version(
        1,
        1,
        1,
        None,
        "keem",
        "ok",
        None,
        None,
        "updater",
        "2026-12-03T10:00:00+00:00",
        (Sentence(sentence),),
        records=(plan,),
    )
    assert "감정·원인" not in "".join(render_sentences(version, date.today()))

    class Opening:  # what chatbot/opening.py reads of a session
        today = date(2026, 12, 21)

    system = messages(Opening(), plan)[0]["content"]  # type: ignore[arg-type]
    assert "계획: 동생과 제주도 여행" in system and "감정: 계획" not in system


def test_a_session_at_eight_in_the_morning_in_korea_is_dated_by_the_korean_calendar(oracle_bot, store):
    """08:30 KST on Monday 2026-12-07 is still Sunday in UTC: the session's prompts, its update and the dates
    resolved against it ("다음 주 화요일") use the Korean date (KEEM_TIMEZONE), not the server's."""
    bot = oracle_bot(fixture_users()[0])
    session = bot.start("지수")
    with bot.store.write():
        bot.store.db.execute(
            "update sessions set started_at = ? where id = ?", ["2026-12-06T23:30:00+00:00", session.session_id]
        )
    "".join(session.send("다음 주 화요일에 면접이라 떨려"))
    job = session.end()
    inp, _ = bot.runner.start(bot.store.queue.get(job))
    assert inp.session_date == date(2026, 12, 7)
    assert resolve_date("다음 주 화요일", inp.session_date) == date(2026, 12, 15)
    utc_bot = oracle_bot(fixture_users()[0], timezone="UTC")
    assert utc_bot.runner.start(utc_bot.store.queue.get(job))[0].session_date == date(2026, 12, 6)
