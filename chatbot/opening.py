"""A friend who asks first: at a session's start the bot opens with one short follow-up question about what is due
(memory/followup.py chooses it from the user's emotion records), streamed like any reply and stored as the
session's first assistant turn. `KEEM_OPENING=off|follow-up` (default follow-up); a study plan may set its own
(chatbot/study.py `opening`). The browser app and `keem session` both call `open_session`.

The opening prompt holds the record (emotion, cause, date, the user's words) and today's date, never the memory
strategy, so in a blind trial openings read the same whichever strategy wrote the records. Whatever the model
writes, the user sees one question: reasoning blocks and a preamble line are dropped and the text stops after
its first question mark.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator, Iterator

from chatbot.session import START, ChatSession
from memory.followup import choose
from memory.prompts import render
from memory.store.emotions import EmotionRecord
from models.base import GenerationOptions, Message
from models.errors import KeemError

log = logging.getLogger(__name__)
OPENING_TOKENS = 96  # a greeting and one question
# An opening answers no message: stored with reply_to 0 it reads first in its session (Turns.of_session orders by
# the message a reply answers), even when the user typed something while it streamed and that was stored first
OPENS = 0
MAX_CHARS = 200
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_QUOTES = "\"'“”‘’「」"


def mode(session: ChatSession) -> str:
    """The session's opening: its study's when the study sets one, else the settings'."""
    return session.opening or session.settings.opening


def due_opening(session: ChatSession) -> EmotionRecord | None:
    """The record this session opens with, or None: openings off, nothing due, the session already under way, or
    only what the last opening asked about (an opening the user never answered does not count)."""
    if mode(session) != "follow-up" or session.history:
        return None
    store = session.store
    records = store.versions.emotions.latest(session.user_id)
    last = store.versions.emotions.last_opening(session.user_id, session.session_id)
    return choose(records, session.today, last)


def messages(session: ChatSession, record: EmotionRecord) -> list[Message]:
    system = render(
        "opening",
        today=session.today.isoformat(),
        since=record.last_seen or record.first_seen,
        quote=record.quote,
        emotion=record.emotion,
        cause=record.cause,
        due=record.due,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": START}]


def one_question(pieces: Iterator[str]) -> Iterator[str]:
    """The text a user sees of an opening as it streams: a <think> block and a preamble line ("네, 이렇게 물어볼게요:")
    dropped, outer quotes taken off, and nothing after the first question mark."""
    held = ""
    started = False
    sent = 0
    for piece in pieces:
        held += piece
        if not started:
            held = _THINK.sub("", held)
            if "<think>" in held.lower():
                continue
            lines = held.lstrip().split("\n")
            while len(lines) > 1 and _not_said(lines[0]):
                lines.pop(0)
            if len(lines) == 1 and len(lines[0]) < 60 and not {"?", "？"} & set(lines[0]):
                held = lines[0]
                continue  # too little yet to tell a preamble from the question
            held, started = "\n".join(lines).lstrip().lstrip(_QUOTES), True
        marks = [m for m in (held.find("?", sent), held.find("？", sent)) if m >= 0]
        if marks or len(held) >= MAX_CHARS:
            end = min(marks) + 1 if marks else MAX_CHARS
            if end > sent:
                yield held[sent:end]
            return
        if len(held) > sent:
            yield held[sent:]
            sent = len(held)
    rest = held.strip().rstrip(_QUOTES) if not started else held[sent:]
    if not started:
        rest = rest.lstrip(_QUOTES)
    if rest:
        yield rest


def _not_said(line: str) -> bool:
    """A line before the opening that is not part of it: blank, a code fence, or a preamble ending in a colon."""
    line = line.strip()
    return not line or line.startswith("```") or line.endswith((":", "："))


def fallback(record: EmotionRecord) -> str:
    """The opening when the model wrote nothing usable: the same one question in plain words."""
    return f"지난번에 이야기한 '{record.cause}' 일은 어떻게 됐어요?"


def open_session(session: ChatSession, record: EmotionRecord | None = None) -> Generator[str, None, None]:
    """Stream the session's opening, if one is due, and store it as its first assistant turn (with the record it
    asked about, so the next opening asks something else). Yields nothing when none is due. A model failure
    before anything streamed gives the plain-words question; after, what streamed stands."""
    record = record or due_opening(session)  # `record`: the due one the caller has just chosen
    if record is None:
        return
    options = GenerationOptions(max_new_tokens=OPENING_TOKENS, temperature=0.7, top_p=0.9)
    shown: list[str] = []
    try:
        try:
            for piece in one_question(session.chat_model.stream(messages(session, record), options)):
                shown.append(piece)
                yield piece
        except KeemError as exc:
            log.warning("opening of session %s failed: %s", session.session_id, exc)
        if not "".join(shown).strip():
            shown = [fallback(record)]
            yield shown[0]
    finally:  # what streamed is stored, even when the tab went away half-way
        text = "".join(shown).replace("\ufffd", "").strip().strip(_QUOTES).strip()
        if text:
            with session.store.write():
                turn_id = session.store.turns.add(
                    session.session_id, session.user_id, "assistant", text, reply_to=OPENS
                )
                session.store.versions.emotions.opened(session.user_id, session.session_id, record.key, turn_id)
            session.history.append({"role": "assistant", "content": text})
