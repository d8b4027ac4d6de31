"""`keem session`: one session in the terminal (interactive or scripted), then the memory update."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatbot.session import Chatbot, ChatSession, check_user_name, clean_message
from chatbot.settings import Settings
from memory.backup import snapshot_if_configured
from memory.store import Store, Version
from models.errors import InputError, KeemError

END_COMMANDS = ("/end", "/quit", "/끝")


MAX_SCRIPT_MESSAGES = 500  # one session; a longer conversation is several sessions


def read_script(path: Path, max_chars: int) -> list[str]:
    """All messages of a script, checked before anything is written; blank lines are skipped."""
    from chatbot.files import read_lines

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


def load_bot(settings: Settings, store: Store | None = None) -> Chatbot:
    """The models and the store; the store is opened first, so a database that cannot be used is one error line
    (the CLI's handler) before minutes of model loading."""
    from memory.backup import open_store
    from models.demo import DEMO_NOTICE
    from models.spec import load_chat_model, load_embedder, resolve_auto

    store = store or open_store(settings.db_path, settings.backup_dir)

    chat_spec, update_spec = resolve_auto(settings.model), resolve_auto(settings.update_model_spec)
    if "auto" in (settings.model, settings.update_model_spec):
        reason = "CUDA found" if chat_spec != "demo" else "no CUDA here, so the offline CPU demo model"
        print(f"model auto -> {chat_spec} ({reason})", file=sys.stderr)
    print(f"loading chat model {chat_spec} ...", file=sys.stderr)
    chat = load_chat_model(chat_spec, load_in_4bit=settings.load_in_4bit)
    update = chat if update_spec == chat_spec else load_chat_model(update_spec, load_in_4bit=settings.load_in_4bit)
    embedder = load_embedder(settings.embedder)
    print(f"chat: {chat.description} | update: {update.description} | embedder: {embedder.name}", file=sys.stderr)
    if "demo" in (chat_spec, update_spec):
        print(DEMO_NOTICE, file=sys.stderr)
    return Chatbot(settings, chat_model=chat, update_model=update, embedder=embedder, store=store)


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
    if bot.store.jobs(statuses=("pending", "running")):
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
            except InputError as exc:
                print(f"error: {exc}", file=sys.stderr)
    job_id = session.end("user")
    if job_id is None:
        print("nothing was said, so the memory stays as it was", file=sys.stderr)
        return 0
    try:
        version = bot.run_update(job_id, stage)
    except KeemError as exc:
        raise KeemError(
            f"the memory update failed and will be retried at the next start; the previous memory is intact ({exc})"
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
