"""The `keem` command line's building blocks: shared option groups, each option declared once, and the one way a
command is added (argparse subcommands with an example in every `--help`).

A command takes the groups it needs as parent parsers. The options that set a `Settings` field are listed in
`SETTING_OF` (argparse dest -> field): flags win over KEEM_* variables, which win over the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from chatbot.settings import RETRIEVALS, Settings

Run = Callable[[Settings, argparse.Namespace], int]

# argparse dest -> Settings field, for every option that sets one (whichever command declares it)
SETTING_OF: dict[str, str] = {
    "db": "db",
    "model": "model",
    "update_model": "update_model",
    "embedder": "embedder",
    "retrieval": "retrieval",
    "reranker": "reranker",
    "strategy": "strategy",
    "memory_cues": "memory_cues",
    "host": "host",
    "port": "port",
    "idle_timeout_min": "idle_timeout_min",
    "study": "study",
    "worker": "worker",
}

RETRIEVAL_HELP = (
    "how memory is searched: hybrid (default: the embedder, with a boost for shared words), dense (the embedder "
    "alone) or lexical (BM25 on Kiwi morphemes) (KEEM_RETRIEVAL; docs/benchmarks.md#retrieval-methods)"
)
EMBEDDER_HELP = (
    "auto (default: e5-small, else use-multilingual), e5, use-multilingual, minilm, ngram, st:<id|path> (KEEM_EMBEDDER)"
)


def _group(title: str) -> tuple[argparse.ArgumentParser, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    return parser, parser.add_argument_group(title)


STORE, _g = _group("storage")
_g.add_argument(
    "--db",
    help="SQLite file, or a postgresql://user@host/db URL for a shared store (KEEM_DB; default: the per-user data "
    "directory; docs/postgres.md)",
)

JSON, _g = _group("output")
_g.add_argument("--json", action="store_true", help="machine-readable output (JSON on stdout)")

USER, _g = _group("user")
_g.add_argument("--user", required=True, help="user name or participant code")

USER_FILTER, _g = _group("user")
_g.add_argument("--user", help="only this user's jobs")

EMBEDDER, _g = _group("embedder")
_g.add_argument("--embedder", help=EMBEDDER_HELP)

RETRIEVAL, _g = _group("retrieval")
_g.add_argument("--retrieval", choices=RETRIEVALS, help=RETRIEVAL_HELP)

RERANKER, _g = _group("reranking")
_g.add_argument(
    "--reranker",
    help="reorder a turn's 20 best memory sentences: off (default), chat (the chat model) or cross-encoder:<path> "
    "(a sentence-transformers CrossEncoder) (KEEM_RERANKER; docs/settings.md)",
)

MODELS, _g = _group("models")
_g.add_argument("--model", help="chat model spec: hf:<id|path>, openai:<model>, demo, auto (KEEM_MODEL)")
_g.add_argument("--update-model", help="model spec for memory updates (KEEM_UPDATE_MODEL; default: --model)")

STUDY, _g = _group("user trial")
_g.add_argument(
    "--study",
    help="a user trial's study plan, a TOML file (KEEM_STUDY): strategies, sessions per participant, the gap "
    "between sessions, consent text and questionnaire (chatbot/study.py)",
)

UPDATES, _g = _group("memory updates")
_g.add_argument(
    "--strategy",
    help="memory update strategy: keem (default), accumulate, operations, or balanced "
    "(a user trial: one per user, balanced, kept) (KEEM_STRATEGY)",
)
_g.add_argument(
    "--memory-cues",
    action="store_const",
    const=True,
    help="the update model also writes cue words for each new memory sentence, searched as a "
    "second view (one extra call per update; KEEM_MEMORY_CUES=1)",
)


def add_command(
    subs: Any,
    name: str,
    help_text: str,
    example: str,
    *,
    description: str | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
    run: Run | None = None,
) -> argparse.ArgumentParser:
    """Add one command (or group) to `subs`: its help, description, shared option groups and example(s).

    `example` is one command line, or several lines (a multi-line epilog starting "examples:")."""
    epilog = example if example.startswith("examples:") else f"example:\n  {example}"
    parser: argparse.ArgumentParser = subs.add_parser(
        name,
        help=help_text,
        description=description or help_text,
        epilog=epilog,
        parents=list(parents),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if run is not None:
        parser.set_defaults(run=run)
    return parser


def add_group(subs: Any, name: str, help_text: str, description: str, example: str) -> Any:
    """A command group (`keem memory ...`): its parser with an example; returns the subparsers for its commands."""
    parser = add_command(subs, name, help_text, example, description=description)
    return parser.add_subparsers(dest=f"{name}_command", required=True)


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the defaults, KEEM_* and the parsed flags (`SETTING_OF`); flags left out are not given."""
    given = vars(args)
    return Settings.load(**{field: given[dest] for dest, field in SETTING_OF.items() if dest in given})


def apply_settings(args: argparse.Namespace, settings: Settings) -> argparse.Namespace:
    """`args` with each setting option holding the value in force (flag, else KEEM_*, else default): what
    chatbot/cli/main.py hands the commands in evaluation/, which cannot import chatbot/, so they read the values the app
    would use (`keem eval memory --embedder` is KEEM_EMBEDDER when not given)."""
    resolved = dataclasses.asdict(settings)
    for dest, field in SETTING_OF.items():
        if dest in vars(args):
            setattr(args, dest, resolved[field])
    return args


def open_store(settings: Settings) -> Any:
    """The store of `settings` (its database, snapshots configured): what the memory, jobs and trial commands read;
    one a newer keem migrated is refused (chatbot/stores.py)."""
    from chatbot.stores import open_checked

    return open_checked(settings.db_path, settings.backup_dir)


def open_engine(settings: Settings) -> Any:
    """The memory engine over `open_store(settings)` with the configured embedder."""
    from memory.engine import MemoryEngine
    from models.spec import load_embedder

    return MemoryEngine(
        open_store(settings), load_embedder(settings.embedder), method=settings.retrieval, day=settings.local_time.day
    )


def print_json(data: Any) -> None:
    """A command's --json output: indented, Korean as is."""
    print(json.dumps(data, ensure_ascii=False, indent=2))
