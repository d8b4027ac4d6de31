"""The `keem` command line: terminal sessions and memory inspection."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatbot.cli.options import (
    EMBEDDER,
    JSON,
    MODELS,
    STORE,
    UPDATES,
    USER,
    add_command,
    add_group,
    apply_settings,
    settings_from,
)
from chatbot.settings import Settings
from models.errors import KeemError

EPILOG_SESSION = """examples:
  keem session --user minsu --model demo                 # chat in the terminal; /end or Ctrl-D ends
  keem session --user minsu --model demo --script s1.txt # one user message per line
  keem session --user minsu --transcript talk.jsonl       # a conversation held elsewhere: its memory update only
  keem session --user minsu --model demo --all-jobs      # also run other users' leftover memory updates first
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 keem session --user minsu --update-model openai:gpt-4o"""


def build_parser() -> argparse.ArgumentParser:
    """Every `keem` command: argparse subcommands, the shared options from chatbot/cli/options.py, a `run` each."""
    from chatbot.cli.chat import add_chat_parser
    from chatbot.cli.jobs import add_jobs_commands
    from chatbot.cli.mcp import add_mcp_parser
    from chatbot.cli.memory_commands import add_memory_commands
    from chatbot.cli.serve import add_serve_parser
    from chatbot.cli.tokens import add_token_commands
    from chatbot.cli.trial import add_trial_commands
    from chatbot.cli.worker import add_worker_parser
    from evaluation.commands import build as build_command
    from evaluation.commands.eval import EVAL_COMMANDS
    from training.command import add_train_parser

    parser = argparse.ArgumentParser(
        prog="keem",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="KEEM chat: a Korean chatbot whose memory of each user an LLM rewrites after every session.",
        epilog="examples:\n  keem chat                      # the browser app on 127.0.0.1:7860\n"
        "  keem session --user minsu --model demo\n  keem memory show --user minsu",
    )
    subs = parser.add_subparsers(dest="command", required=True)

    s = add_command(
        subs,
        "session",
        "hold one chat session in the terminal, then update the memory",
        EPILOG_SESSION,
        description="Hold one session (interactive, or scripted with one message per line; or store one held "
        "elsewhere, --transcript), end it, "
        "run the memory update and print the new memory. When something the user felt is due (an ongoing worry, "
        "an interview whose date has passed), the bot first asks one short question about it (KEEM_OPENING=off: "
        "it does not).",
        parents=[USER, STORE, MODELS, EMBEDDER, UPDATES],
        run=_session,
    )
    given = s.add_mutually_exclusive_group()
    given.add_argument("--script", type=Path, help="file with one user message per line (UTF-8)")
    given.add_argument(
        "--transcript",
        type=Path,
        help='a conversation held elsewhere (another bot, a log): JSONL, one {"role": "user" or "assistant", '
        '"content": ...} per line, stored as this session\'s turns with no reply made, then the memory update',
    )
    s.add_argument(
        "--all-jobs",
        action="store_true",
        help="before the session, also run other users' memory updates left from an earlier run (by default only "
        "this user's run; each prints whose it is and how long it takes)",
    )
    add_memory_commands(subs)  # chatbot/cli/memory_commands.py, with why.py's why / changes / restore / revert
    add_jobs_commands(subs)  # chatbot/cli/jobs.py
    add_trial_commands(subs)  # chatbot/cli/trial.py
    add_chat_parser(subs)
    add_token_commands(subs)
    add_worker_parser(subs)
    add_serve_parser(subs)
    add_mcp_parser(subs)
    p = add_command(
        subs,
        "build-dataset",
        build_command.HELP,
        build_command.EXAMPLE,
        description=build_command.DESCRIPTION,
        parents=[JSON],
        run=_build,
    )
    build_command.add_build_arguments(p)
    # training/command.py builds its own parser; it also registers `keem eval updater`, so it comes first
    add_train_parser(subs).set_defaults(run=_train)
    esubs = add_group(
        subs,
        "eval",
        "evaluate memory strategies the way the KEEM paper does",
        "Evaluate memory-update strategies: keyword recall, NLI conflict ratio, probe perplexity, pairwise "
        "LLM voting, blind human scoring sheets, and retrieval hit@k.",
        "examples:\n  " + "\n  ".join(_first_example(c.example) for c in EVAL_COMMANDS.values()),
    )
    for name, command in EVAL_COMMANDS.items():
        p = add_command(
            esubs,
            name,
            command.help,
            command.example,
            description=command.description,
            parents=[JSON, EMBEDDER] if command.embedder else [JSON],
            run=_eval,
        )
        command.add_arguments(p)
    return parser


def _first_example(example: str) -> str:
    """The first command line of an example or an "examples:" block."""
    lines = [line.strip() for line in example.splitlines() if line.strip() and line.strip() != "examples:"]
    return lines[0]


def main(argv: list[str] | None = None) -> int:
    """Run one `keem` command; errors end as one line with a fix (exit 2), a reader that left early quietly."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe (`keem memory users | head -1`) is caught below
        return code
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say to a closed pipe
        return 0


def _run(argv: list[str] | None) -> int:
    """Parse, then run the command's `run(settings, args)`; every command's KeemError is handled here, once."""
    from chatbot.cli.suggest import parse_args

    args = parse_args(build_parser(), argv)
    run = vars(args).pop("run")  # the command's function; not an argument (reports record vars(args))
    try:
        return run(settings_from(args), args)
    except KeemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted; every turn so far is saved", file=sys.stderr)
        return 130


# -- the commands other modules implement -------------------------------------------------------
def _session(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.cli.session import run_session

    return run_session(settings, args)


def _build(settings: Settings, args: argparse.Namespace) -> int:
    from evaluation.commands.build import run_build

    return run_build(args)


def _train(settings: Settings, args: argparse.Namespace) -> int:
    from training.command import run_train

    return run_train(args)


def _eval(settings: Settings, args: argparse.Namespace) -> int:
    from evaluation.commands.eval import run_eval

    return run_eval(apply_settings(args, settings))


if __name__ == "__main__":
    sys.exit(main())
