"""`keem session`: one session in the terminal (interactive or scripted), then the memory update."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatbot.bot import load_bot
from chatbot.session import ChatSession, check_user_name, clean_message
from chatbot.settings import Settings
from memory.backup import snapshot_if_configured
from memory.store import Version
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


def _say(session: ChatSession, text: str) -> None:
    print(f"사용자> {text}")
    print("keem> ", end="", flush=True)
    for piece in session.send(text):
        print(piece, end="", flush=True)
    print()


def run_session(settings: Settings, args: argparse.Namespace) -> int:
    name = check_user_name(args.user)
    script = read_script(args.script, settings.max_message_chars) if args.script else None
    bot = load_bot(settings)
    stage = lambda s: print(f"[memory update: {s}]", file=sys.stderr)  # noqa: E731
    if bot.store.queue.jobs(statuses=("pending", "running")):
        print("finishing memory updates left from an earlier run ...", file=sys.stderr)
        bot.resume_jobs(stage)
    session = bot.start(name)
    if script is not None:
        for text in script:
            _say(session, text)
    else:
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
        version = bot.run_update(job_id, stage)
    except KeemError as exc:
        raise KeemError(
            f"the memory update failed and will be retried at the next start, or now with `keem jobs retry`; the "
            f"previous memory is intact ({exc})"
        ) from exc
    finally:
        snapshot_if_configured(settings.backup_dir, bot.store)  # the session's turns are kept even when it failed
    if version is not None:
        print(f"\n# {name}: memory v{version.number} ({version.strategy}, {version.status})")
        print_sentences(version)
    return 0


def print_sentences(version: Version) -> None:
    """One '- text' line per memory sentence, with its cue words when it has any."""
    for s in version.sentences:
        print(f"- {s.text}" + (f"  [cues: {s.cues}]" if s.cues else ""))
