"""`keem memory show / history / emotions / search / import / users / forget` (and, from chatbot/cli/why.py, why /
changes / restore / revert): one user's memory, no chat model needed."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

from chatbot.cli.options import (
    EMBEDDER,
    JSON,
    RETRIEVAL,
    STORE,
    USER,
    add_command,
    add_group,
    open_engine,
    open_store,
    print_json,
)
from chatbot.cli.why import add_why_commands
from chatbot.settings import Settings
from memory.dates import read_on
from memory.words import plural
from models.errors import InputError


def add_memory_commands(subs: Any) -> None:
    """Register `keem memory` and its commands."""
    msubs = add_group(
        subs,
        "memory",
        "show, search, import or forget a user's memory",
        "Inspect and manage one user's memory.",
        "keem memory show --user minsu",
    )
    p = add_command(
        msubs,
        "show",
        "print a user's memory (latest version, --version N, or --as-of DATE)",
        "keem memory show --user minsu --json",
        parents=[USER, STORE, JSON],
        run=cmd_show,
    )
    p.add_argument("--version", type=int, help="version number (default: latest)")
    p.add_argument(
        "--as-of",
        type=as_of_date,
        metavar="YYYY-MM-DD",
        help="the memory as it stood at the end of that day (KEEM_TIMEZONE), its times read as on that day",
    )
    add_command(
        msubs,
        "history",
        "list a user's memory versions with what each kept, added, removed and rewrote (by each sentence's origin)",
        "keem memory history --user minsu",
        parents=[USER, STORE, JSON],
        run=cmd_history,
    )
    add_command(
        msubs,
        "emotions",
        "list a user's emotions with their causes (latest version): since, status, how it ended, the user's words",
        "keem memory emotions --user minsu --json",
        parents=[USER, STORE, JSON],
        run=cmd_emotions,
    )
    p = add_command(
        msubs,
        "search",
        "find the memory sentences most relevant to a query",
        'keem memory search --user u1 --k 3 --json "손목 보호대는 이제 안 차도 돼?"',
        parents=[USER, STORE, EMBEDDER, RETRIEVAL, JSON],
        run=cmd_search,
    )
    p.add_argument("--k", type=int, default=5, help="how many sentences (default 5)")
    p.add_argument("query")
    p = add_command(
        msubs,
        "import",
        "add sentences to a user's memory as a new version on top of the latest, whatever writes meanwhile "
        "(creates the user if needed)",
        "keem memory import --user u1 mem.txt   # one sentence per line, or JSONL with a 'text' field",
        parents=[USER, STORE, EMBEDDER, JSON],
        run=cmd_import,
    )
    p.add_argument("file", type=Path)
    add_command(
        msubs,
        "users",
        "list every user with sessions, memory versions and trial strategy",
        "keem memory users --json   # browser-identity users appear as name#key (KEEM_IDENTITY=browser)",
        parents=[STORE, JSON],
        run=cmd_users,
    )
    p = add_command(
        msubs,
        "forget",
        "delete everything stored about a user (sessions, turns, every memory version; a running app's open tabs "
        "of that user are told at their next event, and their ids are never given to another user), or with "
        "--sentence one sentence of their memory completely",
        "keem memory forget --user minsu --yes\n"
        "  keem memory forget --user minsu --sentence 2   # the 2nd sentence of: keem memory show --user minsu",
        parents=[USER, STORE, JSON],
        run=cmd_forget,
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--sentence",
        metavar="TEXT_OR_NUMBER",
        help="erase one sentence of the current memory (its text, or its number in `keem memory show`, from 1) "
        "from every memory version, with its earlier and later forms; the turns that said it read [삭제됨]",
    )
    add_why_commands(msubs)  # why, changes, restore, revert (chatbot/cli/why.py)


def as_of_date(text: str) -> date:
    """--as-of's day: an ISO date, or an error that says what to give."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date; give one as YYYY-MM-DD, e.g. 2026-12-01") from None


def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    user_id = store.users.require(args.user)
    local = settings.local_time
    if args.version and args.as_of:
        raise InputError("give --version or --as-of, not both")
    if args.as_of:
        version = store.versions.as_of(user_id, local.end_of(args.as_of))
        if version is None:
            raise InputError(f"user '{args.user}' had no memory yet on {args.as_of}; see: keem memory history")
    else:
        version = store.versions.get(user_id, args.version) if args.version else store.versions.latest(user_id)
    if version is None:
        raise InputError(f"user '{args.user}' has no memory yet; end a session or run: keem memory import")
    today = args.as_of or local.today()
    if args.json:
        from memory.changelog import version_log
        from memory.provenance import explain_all

        shown = read_on(version.as_json(), today)
        for sentence, why in zip(shown["sentences"], explain_all(store, version), strict=True):
            sentence["why"] = why.as_json(local.iso)
        print_json(
            {
                **shown,
                "created_at": local.iso(version.created_at),
                "changes": version_log(store, version).as_json(local.iso),
            }
        )
    else:
        print(
            f"# {args.user}: memory v{version.number} "
            f"({version.strategy}, {version.status}, {local.stamp(version.created_at)})"
            + (f", as it stood on {args.as_of}" if args.as_of else "")
        )
        from chatbot.cli.session import print_sentences

        print_sentences(version, today, str(args.as_of) if args.as_of else "오늘")
    return 0


def cmd_users(settings: Settings, args: argparse.Namespace) -> int:
    local = settings.local_time
    rows = [
        {**r, "created_at": local.iso(r["created_at"]), "last_session": local.iso(r["last_session"])}
        for r in open_store(settings).users.overview()
    ]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no users yet")
    for r in rows:
        print(
            f"{r['name']}  {plural(r['sessions'], 'session')} (last {local.stamp(r['last_session'])})  "
            f"{plural(r['versions'], 'memory version')}"
            + (f"  trial strategy {r['strategy']}" if r["strategy"] else "")
        )
    return 0


def cmd_emotions(settings: Settings, args: argparse.Namespace) -> int:
    """The latest version's emotion-and-cause records, newest first, as the memory tab's timeline shows them."""
    from memory.emotions import newest_first

    store = open_store(settings)
    user_id = store.users.require(args.user)
    records = newest_first(store.versions.emotions.latest(user_id))
    if args.json:
        print_json([r.as_json() for r in records])
        return 0
    if not records:
        print(f"user '{args.user}' has no emotion records yet")
    for r in records:
        ended = f', ended {r.ended_at}: "{r.ended}"' if r.ended else ""
        due = f", date {r.due}" if r.due else ""
        print(f"{r.emotion} | {r.cause} | since {r.first_seen} | {r.status}{due}{ended}")
        if r.quote:
            print(f'    "{r.quote}"')
    return 0


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    from memory.diff import version_diff
    from memory.store.notes import english

    store = open_store(settings)
    user_id = store.users.require(args.user)
    rows: list[dict[str, Any]] = []
    previous = None
    for v in store.versions.of_user(user_id):
        rows.append(
            {
                **{
                    k: v.as_json()[k]
                    for k in ("version", "created_at", "strategy", "status", "author", "session_id", "model", "notes")
                },
                "note": english(v.notes),  # the notes in words; `notes` has their codes and parameters
                "created_at": settings.local_time.iso(v.created_at),
                "size": len(v.sentences),
                **version_diff(previous, v).as_json(),
            }
        )
        previous = v
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"user '{args.user}' has no memory versions yet")
    for r in rows:
        print(
            f"v{r['version']}  {settings.local_time.stamp(r['created_at'])}  {r['strategy']}/{r['status']}  "
            f"by {r['author']}  "
            f"{plural(r['size'], 'sentence')}: kept {len(r['kept'])}, added {len(r['added'])}, "
            f"removed {len(r['removed'])}, "
            f"rewritten {len(r['rewritten'])}"
        )
        for t in r["added"]:
            print(f"    + {t}")
        for change in r["rewritten"]:
            print(f"    ~ {change['old']} -> {change['new']}")
        for t in r["removed"]:
            print(f"    - {t}")
        if r["note"]:
            print(f"    note: {r['note']}")
    return 0


def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    if args.k < 1:
        raise InputError("--k must be at least 1")
    if not args.query.strip():
        raise InputError("empty query: give the text to search for")
    engine = open_engine(settings)
    user_id = engine.store.users.require(args.user)
    hits = engine.search(user_id, args.query, k=args.k)
    if args.json:
        print_json([{"text": h.text, "score": round(h.score, 4), "sentence_id": h.sentence_id} for h in hits])
    else:
        for h in hits:
            print(f"{h.score:.3f}  {h.text}")
    return 0


MAX_IMPORT_SENTENCES = 5000  # a memory is tens to hundreds of sentences; this is far past any real one
MAX_IMPORT_BYTES = 2_000_000


def read_import_file(path: Path) -> list[str]:
    """Plain text (one sentence per line) or JSONL with a 'text' field; every bad line is reported."""
    from evaluation.files import read_lines
    from memory.text import MAX_SENTENCE_CHARS

    lines = read_lines(
        path,
        "memory import",
        MAX_IMPORT_BYTES,
        MAX_IMPORT_SENTENCES,
        "a memory is tens to hundreds of sentences: import the ones that matter, or split the file",
    )
    jsonl = path.suffix == ".jsonl" or next((ln.lstrip().startswith("{") for ln in lines if ln.strip()), False)
    texts, problems = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        text: Any = line.strip()
        if jsonl:
            try:
                text = json.loads(line).get("text")
            except (json.JSONDecodeError, AttributeError):
                problems.append(f"line {number}: not a JSON object")
                continue
            if not isinstance(text, str) or not text.strip():
                problems.append(f"line {number}: no non-empty 'text' string")
                continue
        if len(text.strip()) > MAX_SENTENCE_CHARS:
            problems.append(f"line {number}: longer than {MAX_SENTENCE_CHARS} characters")
            continue
        texts.append(text.strip())
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise InputError(f"{path}: nothing imported, fix these lines: {shown}")
    if not texts:
        raise InputError(f"{path} has no sentences; put one sentence per line")
    return texts


def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.session import check_user_name
    from memory.store import note
    from memory.updaters.base import accumulate

    texts = read_import_file(args.file)
    name = check_user_name(args.user)
    engine = open_engine(settings)
    user_id = engine.store.users.get_or_create(name)
    previous = engine.current(user_id)
    sentences = accumulate(list(previous.sentences) if previous else [], texts, "imported")
    new = [s for s in sentences if s.provenance == "imported"]
    version = engine.commit(
        user_id,
        sentences,
        base=previous.number if previous else None,  # another process's commit meanwhile: the import is rebased
        strategy="import",
        status="ok",
        author="import",
        notes=[note("imported", count=len(new), file=args.file.name)],
    )
    from memory.backup import snapshot_if_configured

    snapshot_if_configured(settings.backup_dir, engine.store)
    result = {"user": name, "version": version.number, "imported": len(new), "size": len(version.sentences)}
    print_json(result) if args.json else print(
        f"imported {plural(len(new), 'sentence')} into {name}'s memory v{version.number} "
        f"({len(version.sentences)} in all)"
    )
    return 0


def cmd_forget(settings: Settings, args: argparse.Namespace) -> int:
    """Forget a user, or (--sentence) one sentence of their memory, leaving no copy: the database's WAL is emptied,
    older backups deleted and every export zip removed (chatbot/exports.py)."""
    from chatbot.exports import Exports
    from memory.backup import snapshot_if_configured

    store = open_store(settings)
    user_id = store.users.require(args.user)
    text = None
    if args.sentence is not None:
        text = _sentence(store, user_id, args.sentence)
        question = f"erase '{text}' from every memory version of '{args.user}' and redact the turns that said it?"
    else:
        question = f"delete every session, turn and memory version of '{args.user}'?"
    if not args.yes and sys.stdin.isatty():
        answer = input(f"{question} type the name to confirm: ")
        if answer.strip() != args.user:
            print("nothing deleted")
            return 1
    if text is not None:
        from memory.redact import forget_sentence

        erased = forget_sentence(store, user_id, text)
    else:
        erased = store.erasure.forget_user(user_id)
    Exports().remove_all()
    snapshot_if_configured(settings.backup_dir, store, drop_older=True)  # older snapshots still hold the text
    store.close()
    if args.json:
        print_json({"forgotten": args.user, "kind": erased.kind, "rows": erased.counts})
    elif text is not None:
        print(
            f"erased the sentence from {plural(erased.counts['memory_versions'], 'memory version')} of '{args.user}'; "
            f"{plural(erased.counts['turns'], 'turn')} now read{'s' if erased.counts['turns'] == 1 else ''} [삭제됨]"
        )
    else:
        print(f"forgot everything about '{args.user}'")
    return 0


def _sentence(store: Any, user_id: int, given: str) -> str:
    """The text of a sentence of the user's current memory, given as its text or its number in `keem memory show`."""
    latest = store.versions.latest(user_id)
    texts = latest.texts if latest else []
    if given.strip().isdigit():
        number = int(given)
        if not 1 <= number <= len(texts):
            raise InputError(
                f"--sentence {number}: the current memory has {plural(len(texts), 'sentence')}; "
                "see their order with: keem memory show"
            )
        return texts[number - 1]
    return given.strip()
