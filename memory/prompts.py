"""Prompt files rendered strictly: a missing variable is an error, never an empty hole."""

from __future__ import annotations

import functools
import hashlib
from datetime import date
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from memory.dates import relative
from memory.text import elapsed_text

PROMPT_DIR = Path(__file__).parent / "prompts"


@functools.lru_cache(maxsize=1)
def _env() -> Environment:
    # auto_reload off: the prompt files ship with the package and do not change under a running process, and with it
    # on every render stat()ed its file (a chat turn renders a few: 1% of an app process's CPU under load.py)
    return Environment(
        loader=FileSystemLoader(PROMPT_DIR),
        undefined=StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
        auto_reload=False,
    )


def render(name: str, **variables: Any) -> str:
    """Render memory/prompts/<name>.txt; raises jinja2.UndefinedError if a variable is missing."""
    return _env().get_template(f"{name}.txt").render(**variables).strip()


def chat_system_prompt(memory: list[str], today: date, previous_date: date | None) -> str:
    """The chat model's system prompt with the retrieved memory and the dates (the app and the evaluation share it);
    each stored time is followed by how far it is from today, a plan whose time has passed is in the past tense
    (memory/dates.py relative): "2026년 12월 8일(사흘 전)에 시험이 있었다"."""
    return render(
        "chat_system",
        today=today.isoformat(),
        memory=[relative(t, today) for t in memory],
        previous_date=previous_date.isoformat() if previous_date else None,
        elapsed=elapsed_text(previous_date, today),
    )


def chat_note(memory: list[str], message: str, today: date) -> str:
    """The user's message with the memory retrieved for it that the system prompt does not hold, its times relative
    to `today` as in the system prompt: the note goes after the history, so the system prompt stays byte-identical
    within a session (docs/design.md, prompts a server can cache)."""
    return render("chat_note", memory=[relative(t, today) for t in memory], message=message) if memory else message


def prompt_hash(*names: str) -> str:
    """A short hash of the prompt files' text: recorded on every memory version for reproducibility."""
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode())
        digest.update((PROMPT_DIR / f"{name}.txt").read_bytes())
    return digest.hexdigest()[:12]
