"""The bot: the store, memory engine, chat and update models and job runner wired together, and `load_bot`, which
every front end (browser app, terminal, ZeroGPU) uses to build one from settings."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from chatbot.exports import Exports
from chatbot.session import BALANCED, ChatSession, check_user_name
from chatbot.settings import Settings
from chatbot.stores import open_checked
from memory.cues import CueWriter
from memory.engine import MemoryEngine
from memory.jobs import JobRunner
from memory.rerank import load_reranker
from memory.store import Erased, Store, Version
from memory.updaters import STRATEGIES, make_updater
from models.base import ChatModel
from models.embedders import Embedder
from models.errors import InputError


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
        self.store = store or open_checked(settings.db_path, settings.backup_dir)
        self.chat_model = chat_model
        self.update_model = update_model or chat_model
        self.engine = MemoryEngine(
            self.store,
            embedder,
            count_tokens=chat_model.count_tokens,
            method=settings.retrieval,
            day=settings.local_time.day,  # "어제" in a query is the user's yesterday (memory/when.py)
            reranker=load_reranker(settings.reranker, chat_model),
        )
        self.runner = JobRunner(
            self.engine,
            lambda strategy: make_updater(
                strategy, self.update_model, embedder, max_new_tokens=settings.update_max_tokens
            ),
            cue_writer=CueWriter(self.update_model) if settings.memory_cues else None,
            day=settings.local_time.day,  # sessions' dates where the user lives (KEEM_TIMEZONE), not UTC's
            lease_s=settings.job_lease_s,
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
        self.check_strategy(strategy)
        user_id = self.store.users.get_or_create(self.user_key(user_name, browser_key, hf_user))
        return self.begin(user_id, check_user_name(user_name), strategy)

    def check_strategy(self, strategy: str | None) -> str:
        strategy = strategy or self.settings.strategy
        if strategy not in (*STRATEGIES, BALANCED):
            raise InputError(f"unknown strategy '{strategy}'; choose one of: {', '.join((*STRATEGIES, BALANCED))}")
        return strategy

    def begin(self, user_id: int, user_name: str, strategy: str | None = None) -> ChatSession:
        """A new session of a user who exists, with `strategy` or the settings' (the page's login through `start`,
        the HTTP API's first message after a token named the user)."""
        return self.open_session(user_id, user_name, self.strategy_for(user_id, strategy))

    def strategy_for(self, user_id: int, strategy: str | None = None) -> str:
        """The strategy of a user's next session: `strategy` or the settings'; 'balanced' (a user trial) is the one
        assigned to the user at their first session."""
        strategy = self.check_strategy(strategy)
        if strategy == BALANCED:
            strategy = self.store.users.assign_strategy(user_id, STRATEGIES)
        return strategy

    def open_session(self, user_id: int, user_name: str, strategy: str) -> ChatSession:
        """A new session of a user who exists (the next session of a tab keeps its user and strategy)."""
        session_id = self.store.sessions.start(user_id, strategy, self.chat_model.spec)
        return self.session_of(user_id, user_name, session_id)

    def session_of(self, user_id: int, user_name: str, session_id: int) -> ChatSession:
        """A stored session as a ChatSession: its strategy and date, and the conversation its stored turns hold
        (replaced replies left out), ready for the next turn (the HTTP API's open conversation, which any process
        may go on with: chatbot/api/sessions.py)."""
        row = self.store.sessions.get(session_id)
        before = self.store.sessions.previous(user_id, session_id)
        local = self.settings.local_time
        previous_date = local.day(before["started_at"]) if before else None
        self.engine.warm(user_id)
        session = ChatSession(
            self.settings,
            self.chat_model,
            self.engine,
            user_id,
            user_name,
            session_id,
            row["strategy"],
            previous_date,
            today=local.day(row["started_at"]),  # the user's date when it began, in the prompts and the opening
        )
        for turn in self.store.turns.of_session(session_id):
            if turn["role"] == "user":
                session.history.append({"role": "user", "content": turn["text"]})
                session.replying_to = turn["id"]
            else:
                session.history.append({"role": "assistant", "content": turn["text"]})
                session.last_reply = turn["id"]
        session.ended = row["status"] != "open"
        return session

    def forget(self, user_id: int) -> Erased:
        """Delete everything about a user ("나를 잊기", `keem memory forget`): no copy stays in the database file
        (memory/store/erasure.py), and every export zip goes, since one may hold the user (chatbot/exports.py).
        With KEEM_BACKUP_DIR the worker (or the CLI) then writes a snapshot and deletes the older ones."""
        erased = self.engine.forget(user_id)
        Exports().remove_all()
        return erased

    def forget_sentence(self, user_id: int, text: str) -> Erased:
        """Erase one sentence of the user's current memory completely ("완전히 지우기",
        MemoryEngine.forget_sentence), and every export zip, as `forget` does."""
        erased = self.engine.forget_sentence(user_id, text)
        Exports().remove_all()
        return erased

    def run_update(self, job_id: int, on_stage: Callable[[str], None] | None = None) -> Version | None:
        return self.runner.run(job_id, on_stage)

    def resume_jobs(
        self,
        user_id: int | None = None,
        on_job: Callable[[dict[str, Any]], Callable[[str], None] | None] | None = None,
    ) -> list[Version]:
        """Finish jobs a crash or shutdown left behind: this user's, or with no user every user's (each job at most
        once per call). `on_job` is told of each job before it runs and returns the job's stage callback."""
        self.store.queue.requeue_running()  # a dead process's jobs, whoever's: pending again, for whoever runs them
        self.store.queue.retry(user_id=user_id, backoff=False)
        done = []
        for job in self.store.queue.jobs(user_id, statuses=("pending",)):
            on_stage = on_job(job) if on_job else None
            try:
                version = self.runner.run(job["id"], on_stage)
            except Exception:  # recorded on the job; the next start retries it
                continue
            if version is not None:
                done.append(version)
        return done


def load_bot(settings: Settings, store: Store | None = None) -> Chatbot:
    """The models and the store; the store is opened first, so a database that cannot be used is one error line
    (the CLI's handler) before minutes of model loading."""
    from models.demo import DEMO_NOTICE
    from models.local import search_ports
    from models.spec import load_chat_model, load_embedder, resolve

    store = store or open_checked(settings.db_path, settings.backup_dir)

    ports = search_ports()  # KEEM_LOCAL_PORTS: where `auto` looks for a Korean model server
    chat_spec = resolve(settings.model, ports)
    update_spec = (
        chat_spec if settings.update_model_spec == settings.model else resolve(settings.update_model_spec, ports)
    )
    asked_for = {(settings.model, chat_spec), (settings.update_model_spec, update_spec)}  # once when they are one
    for asked, got in sorted(asked_for, key=lambda pair: pair[1] != chat_spec):
        if asked == "auto":
            print(f"model auto -> {got.spec} ({got.reason})", file=sys.stderr)
    print(f"loading chat model {chat_spec.spec} ...", file=sys.stderr)
    chat = load_chat_model(chat_spec, load_in_4bit=settings.load_in_4bit)
    update = chat if update_spec == chat_spec else load_chat_model(update_spec, load_in_4bit=settings.load_in_4bit)
    embedder = load_embedder(settings.embedder)
    print(f"chat: {chat.description} | update: {update.description} | embedder: {embedder.name}", file=sys.stderr)
    if "demo" in (chat_spec.spec, update_spec.spec):
        print(DEMO_NOTICE, file=sys.stderr)
    return Chatbot(settings, chat_model=chat, update_model=update, embedder=embedder, store=store)
