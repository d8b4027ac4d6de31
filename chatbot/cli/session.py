"""`keem session`: one session in the terminal (interactive or scripted), then the memory update."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from chatbot.bot import Chatbot, load_bot
from chatbot.opening import open_session
from chatbot.session import SKIPPED_ROLES, TURN_ROLES, ChatSession, check_user_name, clean_message
from chatbot.settings import Settings
from memory.backup import snapshot_if_configured
from memory.dates import as_read
from memory.store import Version
from memory.words import elapsed, plural
from models.errors import ContextOverflowError, InputError, KeemError

END_COMMANDS = ("/end", "/quit", "/끝")


MAX_SCRIPT_MESSAGES = 500  # one session; a longer conversation is several sessions


def read_script(path: Path, max_chars: int) -> list[str]:
    """All messages of a script, checked before anything is written; blank lines are skipped."""
    from evaluation.files import read_lines

    lines = read_lines(
        path,
        "script",
        MAX_SCRIPT_MESSAGES * (max_chars + 1) * 4,
        MAX_SCRIPT_MESSAGES,
        "one script is one session: split it into several scripts, one per session",
    )
    messages, problems = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            messages.append(clean_message(line, max_chars))
        except InputError as exc:
            problems.append(f"line {number}: {exc}")
    if problems:
        raise InputError(f"{path}: nothing sent, fix these lines: " + "; ".join(problems[:5]))
    if not messages:
        raise InputError(f"{path} has no messages; put one user message per line")
    return messages


def read_transcript(path: Path, max_chars: int) -> list[tuple[str, str]]:
    """A conversation held elsewhere, as (role, text) turns: JSONL in OpenAI's message shape, checked whole before
    anything is written (the token check comes when they are stored: ChatSession.record_turns)."""
    from evaluation.files import read_jsonl

    fix = 'one {"role": "user" or "assistant", "content": "..."} per line'
    rows = read_jsonl(path, if_invalid=fix)
    if len(rows) > MAX_SCRIPT_MESSAGES * 2:
        raise InputError(f"{path} has {len(rows):,} turns, more than one session may have; split it into sessions")
    turns, problems = [], []
    for number, row in enumerate(rows, 1):
        role = row.get("role") if isinstance(row, dict) else None
        content = row.get("content") if isinstance(row, dict) else None
        if role in SKIPPED_ROLES:
            continue
        if role not in TURN_ROLES or not isinstance(content, str):
            problems.append(f"turn {number}: not {fix}")
            continue
        try:
            turns.append((role, clean_message(content, max_chars)))
        except InputError as exc:
            problems.append(f"turn {number}: {exc}")
    if problems:
        raise InputError(f"{path}: nothing stored, fix these turns: " + "; ".join(problems[:5]))
    if not any(role == "user" for role, _ in turns):
        raise InputError(f"{path} has no user turn; {fix}")
    return turns


class JobProgress:
    """A memory update's stage callback: prints each stage to stderr with whose update it is and the time since
    it started."""

    def __init__(self, name: str, job_id: int, clock: Callable[[], float] = time.monotonic):
        self.name, self.job_id, self.clock = name, job_id, clock
        self.started = clock()

    def __call__(self, stage: str) -> None:
        took = elapsed(self.clock() - self.started)
        print(f"[memory update of {self.name} (job {self.job_id}), {took}: {stage}]", file=sys.stderr)


def finish_leftover_jobs(bot: Chatbot, name: str, *, all_users: bool = False) -> None:
    """Before the session: run the user's memory updates an earlier run left (pending, or failed), so the session
    starts from the newest memory; other users' only with `all_users` (`--all-jobs`): one may take minutes on a
    CPU model, and the app or `keem jobs retry` runs them."""
    user_id = bot.store.users.find(name)
    left = bot.store.queue.jobs(statuses=("pending", "running", "failed"))
    others = sum(job["user_id"] != user_id for job in left)
    if others and not all_users:
        print(
            f"{plural(others, 'memory update')} of other users left from an earlier run: not run here (the app "
            "runs them; or `keem session --all-jobs`, `keem jobs retry`)",
            file=sys.stderr,
        )
    if not (all_users and left) and others == len(left):
        return
    names = {u["id"]: u["name"] for u in bot.store.users.all()}

    def on_job(job: dict[str, Any]) -> Callable[[str], None]:
        who = names.get(job["user_id"], f"user {job['user_id']}")
        print(
            f"finishing {who}'s memory update left from an earlier run (job {job['id']}, session {job['session_id']})",
            file=sys.stderr,
        )
        return JobProgress(who, job["id"])

    bot.resume_jobs(None if all_users else user_id, on_job)


def _say(session: ChatSession, text: str) -> None:
    print(f"사용자> {text}")
    print("keem> ", end="", flush=True)
    for piece in session.send(text):
        print(piece, end="", flush=True)
    print()


def _open(session: ChatSession) -> None:
    """The bot's opening question, when one is due (chatbot/opening.py; KEEM_OPENING=off turns it off)."""
    started = False
    for piece in open_session(session):
        if not started:
            print("keem> ", end="", flush=True)
            started = True
        print(piece, end="", flush=True)
    if started:
        print()


def run_session(settings: Settings, args: argparse.Namespace) -> int:
    name = check_user_name(args.user)
    script = read_script(args.script, settings.max_message_chars) if args.script else None
    transcript = read_transcript(args.transcript, settings.max_message_chars) if args.transcript else None
    bot = load_bot(settings)
    finish_leftover_jobs(bot, name, all_users=args.all_jobs)
    session = bot.start(name)
    if transcript is not None:  # held elsewhere: stored as it was said, nothing answered
        session.record_turns(transcript)
        print(f"stored {plural(len(transcript), 'turn')} of {args.transcript}", file=sys.stderr)
    else:
        _open(session)
    if script is not None:
        for text in script:
            _say(session, text)
    elif transcript is None:
        print(f"{name} 님, 안녕하세요. 끝내려면 {END_COMMANDS[0]} 또는 Ctrl-D.", file=sys.stderr)
        while True:
            try:
                text = input("> ")
            except EOFError:
                break
            if text.strip() in END_COMMANDS:
                break
            try:
                _say(session, text)
            except (InputError, ContextOverflowError) as exc:  # the message stays said; the next one may fit
                print(f"error: {exc}", file=sys.stderr)
    job_id = session.end("user")
    if job_id is None:
        print("nothing was said, so the memory stays as it was", file=sys.stderr)
        return 0
    try:
        version = bot.run_update(job_id, JobProgress(name, job_id))
    except KeemError as exc:
        raise KeemError(
            f"the memory update failed and will be retried at the next start, or now with `keem jobs retry`; the "
            f"previous memory is intact ({exc})"
        ) from exc
    finally:
        snapshot_if_configured(settings.backup_dir, bot.store)  # the session's turns are kept even when it failed
    if version is not None:
        print(f"\n# {name}: memory v{version.number} ({version.strategy}, {version.status})")
        print_sentences(version, settings.local_time.today())
    return 0


def print_sentences(version: Version, today: date, label: str = "오늘") -> None:
    """One '- text' line per memory sentence, with its cue words when it has any, and under a sentence whose times
    read differently on `today` how the chat reads it then ("  오늘 기준: ...(사흘 전)...", memory/dates.py)."""
    for s in version.sentences:
        print(f"- {s.text}" + (f"  [cues: {s.cues}]" if s.cues else ""))
        if read := as_read(s.text, today):
            print(f"  {label} 기준: {read}")
