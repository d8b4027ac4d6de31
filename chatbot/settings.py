"""Settings: defaults < KEEM_* environment variables < command-line flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from chatbot.localtime import KOREA, LocalTime, local_time
from memory.fusion import DEFAULT_METHOD, METHODS
from memory.rerank import check_spec
from models.errors import InputError

RETRIEVALS = METHODS  # KEEM_RETRIEVAL
OPENINGS = ("off", "follow-up")  # KEEM_OPENING (chatbot/opening.py)
WORKER = ("on", "off")  # KEEM_WORKER (chatbot/worker.py)


def default_db() -> str:
    from platformdirs import user_data_dir

    return str(Path(user_data_dir("keem-chat", appauthor=False)) / "keem.db")


@dataclass(frozen=True)
class Settings:
    db: str = ""  # KEEM_DB: a SQLite file or a postgresql:// URL (memory/store/connection.py); empty: per-user data dir
    model: str = "auto"  # KEEM_MODEL: hf:<id|path>, openai:<model>, demo, auto
    update_model: str = ""  # KEEM_UPDATE_MODEL; empty means the chat model
    embedder: str = "auto"  # KEEM_EMBEDDER: auto (e5-small, else use-multilingual), e5, use-multilingual, ...
    strategy: str = "keem"  # KEEM_STRATEGY
    retrieval: str = DEFAULT_METHOD  # KEEM_RETRIEVAL: dense, lexical or hybrid (memory/fusion.py)
    reranker: str = "off"  # KEEM_RERANKER: off, chat, cross-encoder:<path> (memory/rerank.py)
    k: int = 5  # KEEM_K: memory sentences retrieved per turn
    token_budget: int = 600  # KEEM_TOKEN_BUDGET: whole memory goes in when it fits this
    max_message_chars: int = 4000  # KEEM_MAX_MESSAGE_CHARS
    reply_max_tokens: int = 256  # KEEM_REPLY_MAX_TOKENS
    update_max_tokens: int = 512  # KEEM_UPDATE_MAX_TOKENS: the most one update call writes; larger rewrites are scoped
    update_workers: int = 0  # KEEM_UPDATE_WORKERS: updates at once (one per user); 0: 4 for openai:, else 1
    reply_concurrency: int = 0  # KEEM_REPLY_CONCURRENCY: replies streaming at once; 0: 32 for openai:, else 4
    memory_cues: bool = False  # KEEM_MEMORY_CUES: the update model writes cue words per sentence (memory/cues.py)
    load_in_4bit: bool = False  # KEEM_LOAD_IN_4BIT (CUDA only)
    host: str = "127.0.0.1"  # KEEM_HOST
    port: int = 7860  # KEEM_PORT
    idle_timeout_min: float = 30.0  # KEEM_IDLE_TIMEOUT_MIN
    identity: str = "auto"  # KEEM_IDENTITY: auto, name or browser (chatbot/cli/chat.py: browser_identity)
    backup_dir: str = ""  # KEEM_BACKUP_DIR: snapshot the database into this folder (memory/backup.py)
    backup_every_min: float = 10.0  # KEEM_BACKUP_EVERY_MIN: how often, when something changed
    study: str = ""  # KEEM_STUDY: a user trial's study plan, a TOML file (chatbot/study.py)
    opening: str = "follow-up"  # KEEM_OPENING: off, follow-up (the bot asks first about what is due)
    timezone: str = KOREA  # KEEM_TIMEZONE: the zone every shown or exported time is in (chatbot/localtime.py)
    worker: str = "on"  # KEEM_WORKER: on (this app process runs update jobs), off (`keem worker` processes do)
    job_lease_s: float = 900.0  # KEEM_JOB_LEASE_S: an update job's lease; another worker takes it when it runs out
    api_rate: int = 120  # KEEM_API_RATE: HTTP API requests a minute per user (an app token: per user it names)

    @property
    def db_path(self) -> str:
        return self.db or default_db()

    @property
    def local_time(self) -> LocalTime:
        """How times are shown (page, exports, CLI): in `timezone`, the zone named."""
        return local_time(self.timezone)

    @property
    def update_model_spec(self) -> str:
        return self.update_model or self.model

    @property
    def reply_slots(self) -> int:
        """Replies (and opening questions) streaming at once, all users together: KEEM_REPLY_CONCURRENCY, else 32
        for an `openai:` chat model (its server batches them; the app only waits) and 4 for one in this process
        (its generations share these CPUs or this GPU)."""
        if self.reply_concurrency > 0:
            return self.reply_concurrency
        return 32 if self.model.startswith("openai:") else 4

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
        """Defaults, then KEEM_<FIELD> from `env` (os.environ), then flags (field=value) that are not None."""
        env = os.environ if env is None else env
        unknown = set(flags) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"Settings has no field {', '.join(sorted(unknown))} (chatbot/cli/options.py: SETTING_OF)")
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"KEEM_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            values[f.name] = _convert(f.name, raw, type(getattr(cls(), f.name)))
        values.update({k: v for k, v in flags.items() if v is not None})
        if values.get("retrieval", DEFAULT_METHOD) not in RETRIEVALS:
            raise InputError(
                f"KEEM_RETRIEVAL={values['retrieval']!r}: choose one of {', '.join(RETRIEVALS)} (docs/settings.md)"
            )
        if "reranker" in values:
            values["reranker"] = check_spec(values["reranker"])
        if values.get("opening", "follow-up") not in OPENINGS:
            raise InputError(f"KEEM_OPENING={values['opening']!r}: choose one of {', '.join(OPENINGS)}")
        if values.get("worker", "on") not in WORKER:
            raise InputError(
                f"KEEM_WORKER={values['worker']!r}: use on (this process runs update jobs) or off "
                "(separate `keem worker` processes do)"
            )
        if values.get("job_lease_s", 900.0) <= 0:
            raise InputError(f"KEEM_JOB_LEASE_S={values['job_lease_s']!r}: give the lease in seconds, above 0")
        if values.get("api_rate", 120) < 1:
            raise InputError(f"KEEM_API_RATE={values['api_rate']!r}: give the requests a minute per user, at least 1")
        settings = replace(cls(), **values)
        local_time(settings.timezone)  # checked where it enters: an unknown zone is one line naming KEEM_TIMEZONE
        return settings


def _convert(name: str, raw: str, kind: type) -> Any:
    try:
        if kind is bool:
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes")
        return kind(raw)
    except ValueError:
        raise InputError(f"KEEM_{name.upper()}={raw!r} is not a valid {kind.__name__}; fix or unset it") from None
