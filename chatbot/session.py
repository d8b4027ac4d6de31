"""The session lifecycle: start (load memory), turn (retrieve, prompt, stream, persist), end (enqueue + update)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from chatbot.settings import Settings
from memory.engine import Hit, MemoryEngine
from memory.prompts import chat_note, chat_system_prompt
from memory.store import Store
from models.base import ChatModel, GenerationOptions, Message
from models.errors import InputError

START = "(대화 시작)"  # the user turn an opening answers in prompts: chat templates that want a user turn first
# In a conversation held elsewhere: the turns ChatSession.record_turns stores, and the roles of a prompt's parts,
# not what the user and the bot said, which its callers skip
TURN_ROLES = ("user", "assistant")
SKIPPED_ROLES = ("system", "developer", "tool", "function")
BALANCED = "balanced"  # KEEM_STRATEGY for user trials: strategies assigned per user, balanced, kept across sessions

USER_NAME = re.compile(r"^[\w][\w .@-]{0,63}$")


def check_user_name(name: str) -> str:
    """A name or participant code: letters (Hangul too), digits, space, . @ _ -; at most 64 characters."""
    name = unicodedata.normalize("NFC", (name or "").strip())
    if not USER_NAME.fullmatch(name):
        raise InputError(
            f"a user name needs 1-64 letters, digits, spaces or . @ _ - (no markup or quotes); got {name[:40]!r}",
            code="bad_user_name",
        )
    return name


def clean_message(text: str, max_chars: int) -> str:
    """Strip control characters and outer whitespace; refuse empty or over-long messages with a fix."""
    text = "".join(ch for ch in (text or "") if ch in "\n\t" or unicodedata.category(ch)[0] != "C").strip()
    if not text:
        raise InputError(
            "empty message: type something to say (control characters and spaces alone don't count)",
            code="empty_message",
        )
    if len(text) > max_chars:
        raise InputError(
            f"message is {len(text):,} characters, the limit is {max_chars:,}; "
            "split it into shorter messages (or raise KEEM_MAX_MESSAGE_CHARS)",
            code="message_too_long",
            length=len(text),
            limit=max_chars,
        )
    return text


def check_message(text: str, max_chars: int, model: ChatModel) -> str:
    """The one check of a user's message, wherever it comes from (the page, the API, the terminal): cleaned
    (`clean_message`), and within half the model's context window; refused with a code (chatbot/web/messages.py
    says each in Korean)."""
    text = clean_message(text, max_chars)
    need, window = model.count_tokens(text), model.context_window
    if need > window // 2:
        raise InputError(
            f"message is {need:,} tokens, more than this model's context allows ({window:,} in all); "
            "shorten it or use a model with a longer context",
            code="message_too_many_tokens",
            tokens=need,
            limit=window // 2,
        )
    return text


@dataclass
class ChatSession:
    """One conversation of one user; every turn is written to SQLite as it happens. It is handed what it uses (the
    settings, the chat model, the memory engine and its store), not the Chatbot that opened it."""

    settings: Settings
    chat_model: ChatModel
    engine: MemoryEngine
    user_id: int
    user_name: str
    session_id: int
    strategy: str
    previous_date: date | None
    history: list[Message] = field(default_factory=list)
    last_hits: list[Hit] = field(default_factory=list)
    ended: bool = False
    # A user trial's rule for the message that makes this session count (its first user message): called inside
    # the write transaction that stores it, so every tab and process meets it there; it raises to refuse, and
    # nothing is stored (chatbot/study.py Study.admit, set by the page)
    gate: Callable[[ChatSession], None] | None = field(default=None, repr=False)
    # messages stored while a reply streams, waiting for theirs (turn id, text); `reply` answers `replying_to`
    queued: list[tuple[int, str]] = field(default_factory=list)
    replying_to: int | None = None  # the stored user turn the next reply answers
    last_reply: int | None = None  # the stored turn of the last reply (`redo` marks it replaced)
    stored_reply: int | None = None  # what the latest `reply` call stored (None: nothing), wherever it answered

    notes: dict[int, list[str]] = field(default_factory=dict)  # history index of a user turn -> its memory note
    pinned: tuple[int | None, list[Hit]] | None = None  # (memory version, what the system prompt holds)
    today: date = field(default_factory=date.today)  # the session's date, fixed so its system prompt is too
    opening: str | None = None  # how the session opens (chatbot/opening.py); None: the settings' KEEM_OPENING
    # the prompts' parts rendered for this session (system_prompt, noted): the same each turn, so rendered once
    _rendered: dict[tuple[Any, ...], str] = field(default_factory=dict, repr=False, compare=False)
    _noted: dict[int, tuple[tuple[Any, ...], str]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def store(self) -> Store:
        return self.engine.store

    def system_prompt(self, hits: list[Hit]) -> str:
        """The system prompt holding `hits`, rendered once for the session's pinned memory: every turn asks for the
        same one, and rendering reads each sentence's times with Kiwi (about 0.4 ms a sentence, busy machine)."""
        key = (tuple(h.text for h in hits), self.today, self.previous_date)
        rendered = self._rendered.get(key)
        if rendered is None:
            rendered = chat_system_prompt(list(key[0]), self.today, self.previous_date)
            if len(self._rendered) >= 4:  # this session's few: the empty prompt, the pinned memory (and a new one)
                self._rendered.clear()
            self._rendered[key] = rendered
        return rendered

    def noted(self, i: int, message: str) -> str:
        """History message `i` with its memory note (`notes[i]`), rendered once per note and message."""
        key = (tuple(self.notes[i]), message)
        done = self._noted.get(i)
        if done is None or done[0] != key:
            done = self._noted[i] = (key, chat_note(self.notes[i], message, self.today))
        return done[1]

    def record(self, text: str, *, queued: bool = False) -> str:
        """Validate and store the user's message (before any generation: a crash never loses what was typed);
        returns it cleaned. A message that cannot be stored raises, and nothing of it is kept. `queued`: typed while
        a reply streams; stored now, it joins the conversation (`take_queued`) when that reply is done."""
        if self.ended:
            raise InputError("this session has ended; start a new one")
        text = check_message(text, self.settings.max_message_chars, self.chat_model)
        with self.store.write():
            turn_id = self._add_user_turn(text)
        if queued:
            self.queued.append((turn_id, text))
        else:
            self.history.append({"role": "user", "content": text})
            self.replying_to = turn_id
        return text

    def _add_user_turn(self, text: str) -> int:
        """Store a checked user message (inside the caller's write transaction): a user trial's rule is met on the
        session's first user message there, so every tab, process and front end meets it."""
        store = self.store
        if self.gate is not None and not store.turns.said_anything(self.session_id):
            self.gate(self)
        return store.turns.add(self.session_id, self.user_id, "user", text)

    def record_turns(self, turns: Sequence[tuple[str, str]]) -> list[int]:
        """Store turns of this conversation said elsewhere, in order: the user's and the replies of another
        program's own model (the HTTP API's POST /v1/sessions/messages). Each is checked as a typed message is; all
        are stored in one transaction or none (a refused one names its index); a reply answers the user message
        before it. Returns the stored turns' ids; the session's update reads them as it reads the page's."""
        if self.ended:
            raise InputError("this session has ended; start a new one")
        checked = []
        for index, (role, text) in enumerate(turns):
            if role not in TURN_ROLES:
                raise InputError(
                    f"messages[{index}]: role {role!r} is not a turn to store; send 'user' and 'assistant' turns",
                    code="bad_body",
                    detail=f"messages[{index}].role",
                )
            try:
                checked.append((role, check_message(text, self.settings.max_message_chars, self.chat_model)))
            except InputError as exc:
                raise InputError(f"messages[{index}]: {exc}", code=exc.code, index=index, **exc.params) from None
        ids, replying_to, last_reply = [], self.replying_to, self.last_reply
        store = self.store
        with store.write():
            for role, text in checked:
                if role == "user":
                    replying_to = self._add_user_turn(text)
                    ids.append(replying_to)
                else:
                    last_reply = store.turns.add(self.session_id, self.user_id, "assistant", text, reply_to=replying_to)
                    ids.append(last_reply)
        self.history.extend(
            {"role": "user" if role == "user" else "assistant", "content": text} for role, text in checked
        )
        self.replying_to, self.last_reply = replying_to, last_reply
        return ids

    def take_queued(self) -> str | None:
        """The oldest queued message (already stored) joins the conversation, for the next `reply`; None: none."""
        if not self.queued:
            return None
        self.replying_to, text = self.queued.pop(0)
        self.history.append({"role": "user", "content": text})
        return text

    def prompt(self, upto: int | None = None) -> list[Message]:
        """The chat prompt for the last recorded user message, laid out so a server can cache it: the system
        prompt holds the memory pinned for the session (byte-identical from turn to turn), and what is retrieved
        for this message beyond it goes in a note before this message, kept there for later turns, so each
        turn's prompt extends the previous one's. `upto`: the conversation up to that many turns only (a message
        answered again after the conversation went on: chatbot/web/replies.py)."""
        settings, model, engine = self.settings, self.chat_model, self.engine
        history = self.history if upto is None else self.history[:upto]
        text = history[-1]["content"]
        room = (
            model.context_window
            - settings.reply_max_tokens
            - model.count_tokens(self.system_prompt([]))
            - model.count_tokens(text)
            - 32
        )
        version_id = self.store.versions.latest_id(self.user_id)
        if self.pinned is None or self.pinned[0] != version_id:  # once per session (again if the memory changed)
            self.pinned = engine.pinned(self.user_id, text, max(0, min(settings.token_budget, room // 2)))
        pinned = self.pinned[1]
        room -= sum(model.count_tokens(h.text) + 4 for h in pinned)
        held = {h.text for h in pinned}
        held.update(line for i, lines in self.notes.items() if i < len(history) - 1 for line in lines)
        earlier = [m["content"] for m in history[:-1] if m["role"] == "user"]  # the query's context (fusion.py)
        hits = engine.search(
            self.user_id, text, k=settings.k, token_budget=settings.token_budget, context=earlier, today=self.today
        )
        self.last_hits, note = [], []
        for hit in hits[: settings.k]:  # the most relevant; those neither pinned nor noted earlier go in the note
            if hit.text not in held:
                room -= model.count_tokens(hit.text) + 4
                if room < 0:
                    break
                note.append(hit.text)
            self.last_hits.append(hit)
        if note:
            self.notes[len(history) - 1] = note
        else:
            self.notes.pop(len(history) - 1, None)
        turns: list[Message] = [
            {"role": m["role"], "content": self.noted(i, m["content"])} if i in self.notes else m
            for i, m in enumerate(history)
        ]
        if turns[0]["role"] == "assistant":  # the bot opened (chatbot/opening.py): strict templates want a user first
            turns.insert(0, {"role": "user", "content": START})
        return [{"role": "system", "content": self.system_prompt(pinned)}, *turns]

    def prepare(self, text: str) -> list[Message]:
        """Record the user's message and build the prompt (everything but generation)."""
        self.record(text)
        return self.prompt()

    def send(self, text: str) -> Iterator[str]:
        """Stream the reply to `text`; what was streamed is persisted even if generation fails half-way."""
        self.record(text)
        return self.reply()

    def reply(self, at: int | None = None, to: int | None = None) -> Generator[str, None, None]:
        """Stream the reply to the last recorded user message; what streamed is stored even if generation fails.

        `at`, `to`: answer instead the user message at that index of the history, stored as turn `to`, from the
        conversation up to it (a message whose reply failed, answered again after later ones): the reply goes right
        after it, in the history as in the stored record (turns.of_session orders replies by `reply_to`)."""
        self.stored_reply = None
        if at is not None and not (0 <= at < len(self.history) and self.history[at]["role"] == "user"):
            raise InputError(f"turn {at} of this session is not a user message to answer")
        if at is not None and at == len(self.history) - 1:
            at = None  # the last message: the usual reply
        messages = self.prompt(None if at is None else at + 1)
        pieces: list[str] = []
        mark: str | None = None
        try:
            for piece in self.chat_model.stream(
                messages,
                GenerationOptions(max_new_tokens=self.settings.reply_max_tokens, temperature=0.7, top_p=0.9),
            ):
                pieces.append(piece)
                yield piece
        except GeneratorExit:  # closed before the end: the user stopped it, and what was shown is what is kept
            mark = "stopped"
            raise
        except BaseException:
            mark = "failed"
            raise
        finally:
            reply = "".join(pieces).replace("\ufffd", "").strip()
            if reply:
                answers = to if to is not None else self.replying_to
                self.stored_reply = self.store.turns.add(
                    self.session_id, self.user_id, "assistant", reply, reply_to=answers, mark=mark
                )
                if at is None:
                    self.last_reply = self.stored_reply
                    self.history.append({"role": "assistant", "content": reply})
                else:
                    self._insert(at + 1, {"role": "assistant", "content": reply})

    def redo(self) -> None:
        """Make the last user message the one the next `reply` answers again (a retry after a failure, or "다시
        생성"): the reply it had, if any, stays stored marked 'replaced' and leaves the conversation."""
        if self.ended:
            raise InputError("this session has ended; start a new one")
        if self.history and self.history[-1]["role"] == "assistant":
            if self.last_reply is not None:
                self.store.turns.replace(self.last_reply, self.session_id, self.user_id)
            self.history.pop()
            self.last_reply = None
        if not self.history or self.replying_to is None:
            raise InputError("nothing to answer again: send a message first")

    def retract(self, at: int, turn_id: int) -> None:
        """Take the reply at index `at` (stored as `turn_id`, e.g. one cut by a failure) out of the conversation
        before its message is answered again: it stays stored, marked 'replaced'."""
        if self.ended:
            raise InputError("this session has ended; start a new one")
        if not (0 <= at < len(self.history)) or self.history[at]["role"] != "assistant":
            raise InputError(f"turn {at} of this session is not a reply")
        self.store.turns.replace(turn_id, self.session_id, self.user_id)
        del self.history[at]
        self.notes = {i - 1 if i > at else i: lines for i, lines in self.notes.items()}
        if at == len(self.history):  # it was the last reply
            self.last_reply = None

    def _insert(self, at: int, message: Message) -> None:
        """A turn into the conversation at `at`; the memory notes keep their messages."""
        self.history.insert(at, message)
        self.notes = {i + 1 if i >= at else i: lines for i, lines in self.notes.items()}

    def user_index(self, nth: int) -> int | None:
        """Where the conversation's `nth` user message (0-based) is in the history; None: there are fewer."""
        users = [i for i, m in enumerate(self.history) if m["role"] == "user"]
        return users[nth] if 0 <= nth < len(users) else None

    def end(self, reason: str = "user") -> int | None:
        """End the session and enqueue its memory update; returns the job id (None when nothing was said)."""
        if self.ended:
            return None
        with self.store.write():  # both or neither: a disk that is full leaves the session open, as it is
            self.store.sessions.check(self.session_id, self.user_id)  # a forgotten user's: UserForgottenError
            self.store.sessions.end(self.session_id, reason)
            job = (
                self.store.queue.enqueue(self.user_id, self.session_id, self.strategy)
                if any(m["role"] == "user" for m in self.history)
                else None
            )
        self.ended = True
        return job
