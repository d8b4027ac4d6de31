"""The session lifecycle: start (load memory), turn (retrieve, prompt, stream, persist), end (enqueue + update)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date

from chatbot.settings import Settings
from memory.backup import open_store
from memory.cues import CueWriter
from memory.engine import Hit, MemoryEngine
from memory.jobs import JobRunner
from memory.prompts import chat_system_prompt
from memory.store import Store, Version
from memory.text import to_date
from memory.updaters import STRATEGIES, make_updater
from models.base import ChatModel, GenerationOptions, Message
from models.embedders import Embedder
from models.errors import InputError

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


@dataclass
class ChatSession:
    """One conversation of one user; every turn is written to SQLite as it happens."""

    bot: Chatbot
    user_id: int
    user_name: str
    session_id: int
    strategy: str
    previous_date: date | None
    history: list[Message] = field(default_factory=list)
    last_hits: list[Hit] = field(default_factory=list)
    ended: bool = False

    def system_prompt(self, hits: list[Hit]) -> str:
        return chat_system_prompt([h.text for h in hits], date.today(), self.previous_date)

    def record(self, text: str) -> str:
        """Validate and store the user's message (before any generation: a crash never loses what was typed);
        returns it cleaned. A message that cannot be stored raises, and nothing of it is kept."""
        if self.ended:
            raise InputError("this session has ended; start a new one")
        settings, model = self.bot.settings, self.bot.chat_model
        text = clean_message(text, settings.max_message_chars)
        need, window = model.count_tokens(text), model.context_window
        if need > window // 2:
            raise InputError(
                f"message is {need:,} tokens, more than this model's context allows ({window:,} in all); "
                "shorten it or use a model with a longer context"
            )
        self.bot.store.add_turn(self.session_id, self.user_id, "user", text)
        self.history.append({"role": "user", "content": text})
        return text

    def prompt(self) -> list[Message]:
        """The chat prompt for the last recorded user message: memory retrieved for it, as much as the context holds."""
        settings, model = self.bot.settings, self.bot.chat_model
        text = self.history[-1]["content"]
        room = (
            model.context_window
            - settings.reply_max_tokens
            - model.count_tokens(self.system_prompt([]))
            - model.count_tokens(text)
            - 32
        )
        hits = self.bot.engine.search(self.user_id, text, k=settings.k, token_budget=settings.token_budget)
        self.last_hits = []
        for hit in hits:  # as many of the most relevant sentences as the model's context holds
            room -= model.count_tokens(hit.text) + 4
            if room < 0:
                break
            self.last_hits.append(hit)
        return [{"role": "system", "content": self.system_prompt(self.last_hits)}, *self.history]

    def prepare(self, text: str) -> list[Message]:
        """Record the user's message and build the prompt (everything but generation)."""
        self.record(text)
        return self.prompt()

    def send(self, text: str) -> Iterator[str]:
        """Stream the reply to `text`; what was streamed is persisted even if generation fails half-way."""
        self.record(text)
        return self.reply()

    def reply(self) -> Iterator[str]:
        """Stream the reply to the last recorded user message; what streamed is stored even if generation fails."""
        messages = self.prompt()
        pieces: list[str] = []
        try:
            for piece in self.bot.chat_model.stream(
                messages,
                GenerationOptions(max_new_tokens=self.bot.settings.reply_max_tokens, temperature=0.7, top_p=0.9),
            ):
                pieces.append(piece)
                yield piece
        finally:
            reply = "".join(pieces).replace("\ufffd", "").strip()
            if reply:
                self.bot.store.add_turn(self.session_id, self.user_id, "assistant", reply)
                self.history.append({"role": "assistant", "content": reply})

    def end(self, reason: str = "user") -> int | None:
        """End the session and enqueue its memory update; returns the job id (None when nothing was said)."""
        if self.ended:
            return None
        with self.bot.store.write():  # both or neither: a disk that is full leaves the session open, as it is
            self.bot.store.end_session(self.session_id, reason)
            job = (
                self.bot.store.enqueue_job(self.user_id, self.session_id, self.strategy)
                if any(m["role"] == "user" for m in self.history)
                else None
            )
        self.ended = True
        return job


class Chatbot:
    """Wires the store, memory engine, chat model, update model and job runner; models come in built."""

    def __init__(
        self,
        settings: Settings,
        *,
        chat_model: ChatModel,
        embedder: Embedder,
        update_model: ChatModel | None = None,
        store: Store | None = None,
    ):
        self.settings = settings
        self.store = store or open_store(settings.db_path, settings.backup_dir)
        self.chat_model = chat_model
        self.update_model = update_model or chat_model
        self.engine = MemoryEngine(self.store, embedder, count_tokens=chat_model.count_tokens)
        self.runner = JobRunner(
            self.engine,
            lambda strategy: make_updater(
                strategy, self.update_model, embedder, max_new_tokens=settings.update_max_tokens
            ),
            cue_writer=CueWriter(self.update_model) if settings.memory_cues else None,
        )

    @staticmethod
    def user_key(user_name: str, browser_key: str | None = None, hf_user: bool = False) -> str:
        """The store's name for an identity: the typed name; with a `browser_key` the name *in that browser*
        ("name#key"; a typed name can never contain '#'), so typing someone's name opens nothing of theirs; with
        `hf_user` a signed-in Hugging Face username, "hf:<name>" (a typed name can never contain ':')."""
        user_name = check_user_name(user_name)
        return f"hf:{user_name}" if hf_user else f"{user_name}#{browser_key}" if browser_key else user_name

    def start(
        self, user_name: str, strategy: str | None = None, browser_key: str | None = None, hf_user: bool = False
    ) -> ChatSession:
        """Open a session for the identity (see `user_key`). With strategy 'balanced' (a user trial) each user keeps
        the strategy assigned at their first session, the one with the fewest users so far."""
        strategy = strategy or self.settings.strategy
        if strategy not in (*STRATEGIES, BALANCED):
            raise InputError(f"unknown strategy '{strategy}'; choose one of: {', '.join((*STRATEGIES, BALANCED))}")
        user_id = self.store.get_or_create_user(self.user_key(user_name, browser_key, hf_user))
        if strategy == BALANCED:
            strategy = self.store.assign_strategy(user_id, STRATEGIES)
        return self.open_session(user_id, check_user_name(user_name), strategy)

    def open_session(self, user_id: int, user_name: str, strategy: str) -> ChatSession:
        """A new session of a user who exists (the next session of a tab keeps its user and strategy)."""
        session_id = self.store.start_session(user_id, strategy, self.chat_model.spec)
        before = self.store.previous_session(user_id, session_id)
        previous_date = to_date(before["started_at"]) if before else None
        self.engine.warm(user_id)
        return ChatSession(self, user_id, user_name, session_id, strategy, previous_date)

    def run_update(self, job_id: int, on_stage: Callable[[str], None] | None = None) -> Version | None:
        return self.runner.run(job_id, on_stage)

    def resume_jobs(self, on_stage: Callable[[str], None] | None = None) -> list[Version]:
        """Finish jobs a crash or shutdown left behind (each job at most once per call)."""
        self.runner.resume()
        done = []
        for job in self.store.jobs(statuses=("pending",)):
            try:
                version = self.runner.run(job["id"], on_stage)
            except Exception:  # recorded on the job; the next start retries it
                continue
            if version is not None:
                done.append(version)
        return done
