"""`keem memory why / changes / restore / revert`: where a sentence came from, what an update changed and why, and
undo (memory/provenance.py, memory/changelog.py, memory/undo.py). The reasons are the same Korean sentences the
memory tab shows; the rest is English, like every command."""

from __future__ import annotations

import argparse
import json
from typing import Any

from chatbot.cli.options import EMBEDDER, JSON, STORE, USER, add_command
from chatbot.localtime import LocalTime
from chatbot.settings import Settings
from memory.changelog import Changelog, version_log
from memory.provenance import Why, explain_all
from memory.store import Store, Version
from memory.words import plural
from models.errors import InputError


def add_why_commands(msubs: Any) -> None:
    """Register the four commands under `keem memory`."""
    p = add_command(
        msubs,
        "why",
        "why a sentence is remembered: the sessions, the user's own words that support it (with scores), the "
        "sentences it continues, the step it came through, and an emotion's words and cause",
        "keem memory why --user minsu 2   # the 2nd sentence of: keem memory show --user minsu",
        parents=[USER, STORE, JSON],
        run=cmd_why,
    )
    p.add_argument("number", type=int, help="the sentence's number in `keem memory show`, from 1")
    p.add_argument("--version", type=int, help="version number (default: latest)")
    p = add_command(
        msubs,
        "changes",
        "what one memory version changed and why: added (from which turns), rewritten (old -> new), kept, dropped "
        "(with the model's reason), restored by the guard, carried by a scoped rewrite, fallback",
        "keem memory changes --user minsu --version 3",
        parents=[USER, STORE, JSON],
        run=cmd_changes,
    )
    p.add_argument("--version", type=int, help="version number (default: latest)")
    p = add_command(
        msubs,
        "restore",
        "bring back a sentence an update dropped, as a new version by the user (on top of the latest memory)",
        "keem memory restore --user minsu --sentence 1   # the 1st dropped sentence of: keem memory changes",
        parents=[USER, STORE, EMBEDDER, JSON],
        run=cmd_restore,
    )
    p.add_argument(
        "--sentence",
        required=True,
        metavar="TEXT_OR_NUMBER",
        help="its number among the dropped sentences of the latest update (`keem memory changes` lists them, "
        "from 1), or the text of a sentence an earlier version held",
    )
    p = add_command(
        msubs,
        "revert",
        "make a new version equal to an earlier one (undo an update: --to the version before it); the versions "
        "in between stay in the history",
        "keem memory revert --user minsu --to 2",
        parents=[USER, STORE, EMBEDDER, JSON],
        run=cmd_revert,
    )
    p.add_argument("--to", type=int, required=True, help="the version to bring back (see: keem memory history)")


def _store(settings: Settings) -> Store:
    from chatbot.stores import open_checked

    return open_checked(settings.db_path, settings.backup_dir)


def _engine(settings: Settings) -> Any:
    from memory.engine import MemoryEngine
    from models.spec import load_embedder

    return MemoryEngine(
        _store(settings), load_embedder(settings.embedder), method=settings.retrieval, day=settings.local_time.day
    )


def _snapshot(settings: Settings, store: Store) -> None:
    from memory.backup import snapshot_if_configured

    snapshot_if_configured(settings.backup_dir, store)


def _version(store: Store, user: str, number: int | None) -> Version:
    user_id = store.users.require(user)
    version = store.versions.get(user_id, number) if number else store.versions.latest(user_id)
    if version is None:
        raise InputError(f"user '{user}' has no memory yet; end a session or run: keem memory import")
    return version


def _print(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


def print_why(w: Why, local: LocalTime) -> None:
    """One sentence's provenance; times in KEEM_TIMEZONE with the zone named, like every time the CLI prints."""
    print(f"{w.number}. {w.text}")
    print(f"   kind: {w.kind}; step: {w.step or 'not recorded (written before provenance was kept)'}")
    if w.sessions:
        print(f"   sessions: {', '.join(dict.fromkeys(f'{local.local(at):%Y-%m-%d}' for at in w.sessions))}")
    if w.written_at:
        print(f"   written by a person at {local.stamp(w.written_at)}")
    for q in w.quotes:
        print(f'   said: "{q.text}" ({local.stamp(q.at)}, score {q.score:.2f})')
    for old in w.continues:
        print(f"   continues: {old}")
    if w.summary_line:
        print(f"   summary line: {w.summary_line}")
    if w.op:
        print(f"   operation: {w.op}")
    if w.emotion:
        print(f"   emotion: {', '.join(w.emotion.emotion)}; cause: {w.emotion.cause or '-'}")


def cmd_why(settings: Settings, args: argparse.Namespace) -> int:
    store = _store(settings)
    version = _version(store, args.user, args.version)
    if not 1 <= args.number <= len(version.sentences):
        raise InputError(
            f"sentence {args.number}: memory v{version.number} has {plural(len(version.sentences), 'sentence')}; "
            "see their order with: keem memory show"
        )
    why = explain_all(store, version)[args.number - 1]
    if args.json:
        _print({"version": version.number, **why.as_json(settings.local_time.iso)})  # times with KEEM_TIMEZONE's offset
    else:
        print_why(why, settings.local_time)
    return 0


def print_changelog(log: Changelog) -> None:
    counts = ", ".join(f"{k} {n}" for k, n in log.counts().items()) or "no change"
    print(f"v{log.version} (by {log.author}, {log.status}; from v{log.base or 0}): {counts}")
    drops = 0
    for e in log.entries:
        if e.kind == "kept":
            continue
        if e.kind == "rewritten":
            marked = " ".join(f"[{part}]" if changed else part for part, changed in e.changed)
            print(f"  ~ rewritten: {e.old} -> {marked}")
        elif e.kind == "dropped":
            drops += 1
            print(f"  - dropped ({drops}): {e.text}")
        elif e.kind == "fallback":
            print("  ! fallback")
        else:
            print(f"  {'+' if e.kind == 'added' else '='} {e.kind}: {e.text}")
        print(f"      {e.reason}")
        for q in e.quotes[:2]:
            print(f'      said: "{q.text}"')
    kept = log.of("kept")
    if kept:
        print(f"  kept: {plural(len(kept), 'sentence')}")


def cmd_changes(settings: Settings, args: argparse.Namespace) -> int:
    store = _store(settings)
    log = version_log(store, _version(store, args.user, args.version))
    if args.json:
        _print(log.as_json(settings.local_time.iso))
    else:
        print_changelog(log)
    return 0


def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    from memory.undo import dropped_sentence, restore

    engine = _engine(settings)
    store = engine.store
    user_id = store.users.require(args.user)
    given = args.sentence.strip()
    if given.isdigit():
        update = next((v for v in reversed(store.versions.of_user(user_id)) if v.author == "updater"), None)
        drops = version_log(store, update).of("dropped") if update else []
        if not 1 <= int(given) <= len(drops):
            raise InputError(
                f"--sentence {given}: the latest update dropped {plural(len(drops), 'sentence')}; "
                "see them with: keem memory changes"
            )
        sentence = dropped_sentence(engine, user_id, drops[int(given) - 1].sentence_id or 0)
    else:
        row = store.one(
            "select id from memory_sentences where user_id = ? and text = ? order by id desc limit 1", [user_id, given]
        )
        if row is None:
            raise InputError("no memory version of this user held that sentence; copy it from: keem memory changes")
        sentence = dropped_sentence(engine, user_id, row["id"])
    version = restore(engine, user_id, sentence)
    _snapshot(settings, store)
    if args.json:
        _print({"user": args.user, "version": version.number, "restored": sentence.text})
    else:
        print(f"restored into {args.user}'s memory v{version.number}: {sentence.text}")
    return 0


def cmd_revert(settings: Settings, args: argparse.Namespace) -> int:
    from memory.undo import revert

    engine = _engine(settings)
    user_id = engine.store.users.require(args.user)
    latest = engine.current(user_id)
    if latest is None:
        raise InputError(f"user '{args.user}' has no memory yet")
    version = revert(engine, user_id, args.to, base=latest.number)
    _snapshot(settings, engine.store)
    if args.json:
        _print({"user": args.user, "version": version.number, "reverted_to": args.to, "size": len(version.texts)})
    else:
        print(f"{args.user}'s memory v{version.number} is v{args.to} again ({plural(len(version.texts), 'sentence')})")
    return 0
