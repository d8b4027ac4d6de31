"""The session lifecycle: input checks, turns persisted as they happen, memory in the prompt, session end."""

from __future__ import annotations

import pytest

from chatbot.bot import Chatbot
from chatbot.session import check_user_name, clean_message
from chatbot.settings import Settings
from memory.store import Sentence
from models.embedders import NgramEmbedder
from models.errors import GenerationError, InputError
from models.fake import ScriptedChatModel


@pytest.fixture
def bot(store):
    return Chatbot(
        Settings(db=store.path, max_message_chars=50),
        chat_model=ScriptedChatModel(responder=lambda msgs: "그랬구나!"),
        embedder=NgramEmbedder(),
        store=store,
    )


def test_a_turn_retrieves_memory_into_the_system_prompt_and_persists_both_turns(bot, store):
    session = bot.start("minsu")
    bot.engine.commit(
        session.user_id,
        [Sentence("사용자는 테니스를 치다가 손목을 다쳤다."), Sentence("사용자는 고양이를 키운다.")],
        base=None,
        strategy="import",
        status="ok",
        author="import",
    )
    assert "".join(session.send("손목은 좀 나았어")) == "그랬구나!"
    system = bot.chat_model.calls[-1][0]["content"]
    assert "사용자는 테니스를 치다가 손목을 다쳤다." in system and "오늘 날짜" in system and "지난 대화:" not in system
    assert session.last_hits and session.last_hits[0].text.startswith("사용자는 테니스")
    assert [(t["role"], t["text"]) for t in store.turns.of_session(session.session_id)] == [
        ("user", "손목은 좀 나았어"),
        ("assistant", "그랬구나!"),
    ]


def test_what_the_user_typed_and_what_was_shown_survive_a_failing_model(bot, store):
    def broken():
        yield "반가"
        raise GenerationError("model crashed")

    bot.chat_model.stream = lambda messages, options=None: broken()
    session = bot.start("minsu")
    with pytest.raises(GenerationError):
        list(session.send("안녕"))
    assert [(t["role"], t["text"]) for t in store.turns.of_session(session.session_id)] == [
        ("user", "안녕"),
        ("assistant", "반가"),
    ]


@pytest.mark.parametrize(
    "text, message",
    [("", "empty"), ("   \n\t ", "empty"), ("\x00\x07\x1b", "empty"), ("가" * 100_000, "100,000 characters")],
)
def test_bad_messages_are_refused_and_nothing_is_written(bot, store, text, message):
    session = bot.start("minsu")
    with pytest.raises(InputError, match=message):
        list(session.send(text))
    assert store.turns.of_session(session.session_id) == []


def test_control_characters_are_stripped():
    assert clean_message("안녕\x00하세요\x1b", 100) == "안녕하세요"


@pytest.mark.parametrize("name", ["", "<script>alert(1)</script>", "x'; drop table users;--", "a" * 65, "\x00"])
def test_bad_user_names_are_refused(name):
    with pytest.raises(InputError, match="user name"):
        check_user_name(name)


def test_good_user_names_pass():
    assert check_user_name(" 김민수 ") == "김민수" and check_user_name("P-017") == "P-017"


def test_ending_enqueues_the_update_and_the_next_session_knows_the_last_date(bot, store):
    session = bot.start("minsu")
    list(session.send("안녕"))
    job = session.end()
    assert store.queue.get(job)["status"] == "pending" and store.sessions.get(session.session_id)["status"] == "ended"
    assert session.end() is None
    with pytest.raises(InputError, match="ended"):
        list(session.send("또"))
    nxt = bot.start("minsu")
    assert nxt.previous_date is not None
    assert bot.start("minsu").end() is None  # nothing said: no update


def test_unknown_strategy_is_refused(bot):
    with pytest.raises(InputError, match="keem, accumulate"):
        bot.start("minsu", strategy="magic")


MANY = [
    "사용자는 테니스를 치다가 손목을 다쳤다.",
    "사용자는 고양이 나비를 키운다.",
    "사용자는 다음 달에 제주도로 여행을 간다.",
    "사용자의 언니는 부산에 산다.",
    "사용자는 회사에서 마케팅 일을 한다.",
    "사용자는 매운 음식을 좋아한다.",
    "사용자는 요즘 피아노를 배우고 있다.",
    "사용자는 작년에 이사를 했다.",
]


@pytest.mark.parametrize("budget", [600, 60], ids=["whole memory", "memory over budget"])
def test_each_turn_extends_the_previous_prompt_and_the_system_prompt_stays_byte_identical(store, budget):
    bot = Chatbot(
        Settings(db=store.path, token_budget=budget, k=3),
        chat_model=ScriptedChatModel(responder=lambda msgs: "그랬구나!"),
        embedder=NgramEmbedder(),
        store=store,
    )
    user_id = bot.start("minsu").user_id
    bot.engine.commit(user_id, [Sentence(t) for t in MANY], base=None, strategy="import", status="ok", author="import")
    session = bot.start("minsu")
    said = ["테니스 치다가 다친 손목은 좀 나았어", "요즘 배우고 있는 피아노 학원에 다녀왔어"]
    said.append("언니가 부산에서 놀러 왔어")
    for text in said:
        list(session.send(text))
    first, second, third = bot.chat_model.calls[-3:]
    for before, after in ((first, second), (second, third)):
        assert after[0]["content"] == before[0]["content"]  # byte-identical system prompt
        assert after[: len(before)] == before  # the earlier prompt is a prefix of the later one
        assert after[len(before)] == {"role": "assistant", "content": "그랬구나!"}
    system = first[0]["content"]
    if budget == 600:  # the whole memory, in its own order; nothing else is needed
        assert all(line in system for line in MANY)
        assert system.index(MANY[0]) < system.index(MANY[-1]) and "[관련 기억]" not in str(third[1:])
    else:  # a selection for the first message; later messages bring what they need in a note
        assert MANY[0] in system and sum(line in system for line in MANY) < len(MANY)
        note = third[3]["content"]
        assert note.startswith("[관련 기억]") and MANY[6] in note and MANY[6] not in system
        assert note.endswith("요즘 배우고 있는 피아노 학원에 다녀왔어")
        noted = [line for m in third[1::2] for line in m["content"].splitlines() if line.startswith("- ")]
        assert len(noted) == len(set(noted))  # a sentence an earlier note gave is not given again
    assert [t["text"] for t in store.turns.of_session(session.session_id) if t["role"] == "user"][1] == (
        "요즘 배우고 있는 피아노 학원에 다녀왔어"
    )  # the note is prompt only, never stored as what the user said


def test_a_message_whose_reply_failed_is_answered_later_in_its_place_and_a_cut_reply_can_be_retracted(store):
    """다시 보내기 after the conversation went on (chatbot/web/replies.py): the earlier message is answered from the
    conversation up to it, the reply goes right after it (history and stored record alike), later notes stay with
    their messages, and the last reply is still the one 다시 생성 replaces."""
    model = ScriptedChatModel(replies=[GenerationError("down")], responder=lambda msgs: "그랬구나!")
    bot = Chatbot(
        Settings(db=store.path, token_budget=60, k=3), chat_model=model, embedder=NgramEmbedder(), store=store
    )
    user_id = bot.start("minsu").user_id
    bot.engine.commit(user_id, [Sentence(t) for t in MANY], base=None, strategy="import", status="ok", author="import")
    session = bot.start("minsu")
    with pytest.raises(GenerationError):
        list(session.send("테니스 치다가 다친 손목은 좀 나았어"))
    first = session.replying_to
    list(session.send("요즘 배우고 있는 피아노 학원에 다녀왔어"))
    assert MANY[6] in "\n".join(session.notes[1])  # the second message's note
    piano_note = session.notes[1]
    assert "".join(session.reply(at=0, to=first)) == "그랬구나!"
    asked = model.calls[-1]
    assert asked[-1]["content"].endswith("손목은 좀 나았어") and "피아노 학원" not in str(asked)
    assert [m["role"] for m in session.history] == ["user", "assistant", "user", "assistant"]
    assert session.notes[2] == piano_note and 1 not in session.notes  # the note moved with its message
    turns = store.turns.of_session(session.session_id)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert turns[1]["reply_to"] == first and [t["text"] for t in turns] == [m["content"] for m in session.history]
    assert session.last_reply == turns[3]["id"] and session.stored_reply == turns[1]["id"]
    with pytest.raises(InputError, match="not a user message"):
        list(session.reply(at=1))

    session.retract(1, turns[1]["id"])  # taken out again: stored, marked replaced
    assert [m["role"] for m in session.history] == ["user", "user", "assistant"] and session.notes[1] == piano_note
    assert [t["role"] for t in store.turns.of_session(session.session_id)] == ["user", "user", "assistant"]
    assert store.turns.of_session(session.session_id, replaced=True)[1]["mark"] == "replaced"
    assert session.last_reply == turns[3]["id"]  # the last reply is still the last


def test_a_message_over_half_the_context_is_refused_with_one_code_on_the_page_and_in_the_session():
    """One check (chatbot/session.py check_message) for the session and the page: code message_too_many_tokens,
    the tokens and the limit as params, its Korean text from chatbot/web/messages.py."""
    from chatbot.session import check_message
    from chatbot.web.messages import korean_error

    model = ScriptedChatModel(context_window=64)
    text = "가나다라 " * 40
    with pytest.raises(InputError) as refused:
        check_message(text, 4000, model)
    assert refused.value.code == "message_too_many_tokens" and refused.value.params["limit"] == 32
    assert "토큰" in korean_error(refused.value) and "32" in korean_error(refused.value)
    assert check_message("  안녕  ", 4000, model) == "안녕"


def test_a_vague_message_retrieves_by_the_turns_before_it(store):
    bot = Chatbot(
        Settings(db=store.path, k=1, token_budget=1, retrieval="hybrid"),
        chat_model=ScriptedChatModel(responder=lambda msgs: "그랬구나!"),
        embedder=NgramEmbedder(),
        store=store,
    )
    cat, dog = "사용자의 고양이 이름은 나비다", "사용자의 강아지 이름은 초코다"
    firsts = []
    for name, opening in (("minsu", "우리 강아지가 계속 짖어"), ("jisu", "우리 고양이가 밥을 안 먹어")):
        session = bot.start(name)
        bot.engine.commit(
            session.user_id, [Sentence(cat), Sentence(dog)], base=None, strategy="import", status="ok", author="import"
        )
        "".join(session.send(opening))
        "".join(session.send("걔 이름 뭐였더라?"))
        firsts.append(session.last_hits[0].text)
    assert firsts == [dog, cat]


def test_the_system_prompt_is_rendered_once_a_memory_and_again_when_the_memory_changes(bot, store):
    """Reading each memory sentence's times (Kiwi) was repeated every turn for the same prompt: the session renders
    it once for its pinned memory, and a version committed meanwhile (an edit in the memory tab, another session's
    update) is in the next turn's prompt, the old sentence gone."""
    user_id = bot.start("minsu").user_id
    made = {"strategy": "import", "status": "ok"}
    exam = [Sentence("사용자는 12월 8일에 시험이 있다.")]
    first = bot.engine.commit(user_id, exam, base=None, author="import", **made)
    session = bot.start("minsu")
    for text in ("시험 준비 중이야", "조금 떨려"):
        list(session.send(text))
    before, after = (call[0]["content"] for call in bot.chat_model.calls[-2:])
    assert after is before  # the same rendering, not an equal one made again
    bot.engine.commit(user_id, [Sentence("사용자는 시험을 미루었다.")], base=first.number, author="user", **made)
    list(session.send("시험 미뤘어"))
    changed = bot.chat_model.calls[-1][0]["content"]
    assert "사용자는 시험을 미루었다." in changed and "12월 8일" not in changed
