"""`keem trial export`: what a multi-session user trial collected, per participant, ready for analysis.

Writes into a new folder:
  participants.csv       one row per participant: strategy, sessions, user turns, first and last session, versions,
                         sessions with a questionnaire
  sessions.jsonl         one line per session with its number (1, 2, ... among the sessions the participant spoke
                         in), its turns (role, text, time) and how it ended
  memory_versions.jsonl  one line per memory version with its sentences (provenance, cue words), `notes` (why it is
                         as it is, as codes with parameters: memory/store/notes.py) and `changes`: what
                         it kept, added, removed and rewrote since the participant's previous version (memory/diff.py);
                         `provenance`: where each sentence came from (memory/provenance.py: sessions, the user's
                         words with scores, what it continues); `changelog`: what changed and why
                         (memory/changelog.py); `emotions`: the version's emotion-and-cause records (memory/emotions.py:
                         emotion, cause, status, since, due, the user's words and how it ended), from the same
                         extraction for every strategy, so a trial can compare them
  questionnaire.csv      one row per session and questionnaire item (chatbot/study.py), with the session's
                         strategy
  manifest.json          when, what, the counts, the time zone, and how many pieces of personal data were replaced,
                         per kind
Every time is ISO 8601 with its offset, in the zone of KEEM_TIMEZONE (Korea Standard Time by default: +09:00).
Every exported text (turns, memory sentences and cues, notes, free-text answers, names) goes through
chatbot/trials/pii.py: phone numbers, e-mail addresses, resident registration, card and account numbers and street
addresses become tags ([전화번호] ...). The database keeps what was typed. scrub=False (--no-scrub) exports raw text.
With --pseudonymize, names become P001, P002, ... (by order of first use) and key.csv maps them back (raw names,
the one file never scrubbed): keep it apart from the data. A browser-identity user ("name#key",
KEEM_IDENTITY=browser) appears with only the key's first 6 characters: the full key is a credential.

The folder appears whole or not at all: the files are written into a hidden folder beside it (.NAME.partial-*),
synced, and renamed into place; a full disk, a read-only place or a missing permission removes that folder (and any
folder made for it) and is a StorageError that names the cause and the fix, so a retry then works.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from chatbot.localtime import LocalTime
from chatbot.study_records import records
from chatbot.trials.pii import TAGS, Scrubber
from memory.changelog import changed_parts, changelog
from memory.diff import version_diff
from memory.provenance import explain_all
from memory.store import Store, now_iso
from models.errors import InputError, StorageError

FILES = ("participants.csv", "sessions.jsonl", "memory_versions.jsonl", "questionnaire.csv", "manifest.json")
QUESTIONNAIRE_FIELDS = (
    "participant",
    "session",
    "session_number",
    "strategy",
    "study",
    "item",
    "kind",
    "question",
    "value",
    "answered_at",
)


T = TypeVar("T")


def export(
    store: Store, out: Path, pseudonymize: bool = False, scrub: bool = True, *, local: LocalTime
) -> dict[str, Any]:
    """Write the export files into `out` (which must not hold an earlier export), whole or not at all; returns
    counts, with `pii`: the pieces of personal data replaced per kind (all 0 when scrub=False). Times are in
    `local`'s zone (KEEM_TIMEZONE: Settings.local_time), with the offset."""
    _refuse_earlier(out)
    return _whole_folder(out, lambda folder: _write(store, folder, pseudonymize, scrub, local))


def _write(store: Store, out: Path, pseudonymize: bool, scrub: bool, local: LocalTime) -> dict[str, Any]:
    """The export files, written into the (new, empty) folder `out`."""
    iso = local.iso
    users = store.users.all()
    if not users:
        raise InputError("the database has no participants yet; check --db / KEEM_DB")
    scrubber = Scrubber()
    clean = scrubber if scrub else (lambda text: text)
    alias = _aliases(users, pseudonymize, clean)
    counts: dict[str, Any] = {"participants": len(users), "sessions": 0, "turns": 0, "versions": 0, "answers": 0}
    rows: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    with (
        open(out / "sessions.jsonl", "w", encoding="utf-8") as sessions_file,
        open(out / "memory_versions.jsonl", "w", encoding="utf-8") as versions_file,
    ):
        for user in users:
            sessions, versions = store.sessions.of_user(user["id"]), store.versions.of_user(user["id"])
            numbers, user_turns, turn_count = _write_sessions(
                store, sessions, alias[user["id"]], clean, iso, sessions_file
            )
            counts["turns"] += turn_count
            for previous, v in zip([None, *versions], versions, strict=False):
                line = {
                    "participant": alias[user["id"]],
                    **_clean_version(v.as_json(), clean),
                    "created_at": iso(v.created_at),
                    "changes": _clean_changes(version_diff(previous, v).as_json(), clean),
                    "provenance": _clean_json([w.as_json(iso) for w in explain_all(store, v)], clean),
                    "changelog": _clean_log(changelog(store, previous, v).as_json(iso), clean),
                    "emotions": _clean_json([r.as_json() for r in v.records], clean),
                }
                versions_file.write(json.dumps(line, ensure_ascii=False) + "\n")
            strategy_of = {s["id"]: s["strategy"] for s in sessions}
            mine = [
                {
                    "participant": alias[user["id"]],
                    "session": a["session_id"],
                    "session_number": numbers.get(a["session_id"]),
                    "strategy": strategy_of.get(a["session_id"]),
                    "study": a["study_id"],
                    "item": a["item"],
                    "kind": a["kind"],
                    "question": clean(a["question"] or ""),
                    "value": a["value"] if a["kind"] == "likert" else clean(str(a["value"])),
                    "answered_at": iso(a["created_at"]),
                }
                for a in records(store).answers(user_id=user["id"])
            ]
            answers += mine
            counts["sessions"] += len(sessions)
            counts["versions"] += len(versions)
            rows.append(
                {
                    "participant": alias[user["id"]],
                    "strategy": user["strategy"] or (sessions[-1]["strategy"] if sessions else ""),
                    "sessions": len(sessions),
                    "user_turns": user_turns,
                    "first_session": iso(sessions[0]["started_at"]) if sessions else "",
                    "last_session": iso(sessions[-1]["started_at"]) if sessions else "",
                    "memory_versions": len(versions),
                    "questionnaires": len({a["session"] for a in mine}),
                }
            )
    counts["answers"] = len(answers)
    _csv(out / "participants.csv", rows)
    _csv(out / "questionnaire.csv", answers, QUESTIONNAIRE_FIELDS)
    if pseudonymize:
        _csv(out / "key.csv", [{"participant": alias[u["id"]], "name": shown_name(u["name"])} for u in users])
    counts["pii"] = scrubber.report()
    files = [*FILES, *(["key.csv"] if pseudonymize else [])]
    _write_manifest(out, files, pseudonymize, scrub, counts, local)
    return counts


def _write_sessions(
    store: Store,
    sessions: list[dict[str, Any]],
    participant: str,
    clean: Callable[[str], str],
    iso: Callable[..., str | None],
    file: Any,
) -> tuple[dict[int, int | None], int, int]:
    """One participant's sessions as lines of sessions.jsonl; returns each session's number (counting only the
    sessions where the user said something; None for the others), the user's turns and all turns."""
    user_turns, turn_count, number = 0, 0, 0
    numbers: dict[int, int | None] = {}
    for s in sessions:
        turns = [
            {"role": t["role"], "text": clean(t["text"]), "at": iso(t["created_at"])}
            for t in store.turns.of_session(s["id"])
        ]
        said = sum(t["role"] == "user" for t in turns)
        number += bool(said)
        numbers[s["id"]] = number if said else None
        user_turns += said
        turn_count += len(turns)
        file.write(
            json.dumps(
                {
                    "participant": participant,
                    "session": s["id"],
                    "number": numbers[s["id"]],
                    "strategy": s["strategy"],
                    "chat_model": s["chat_model"],
                    "started_at": iso(s["started_at"]),
                    "ended_at": iso(s["ended_at"]),
                    "end_reason": s["end_reason"],
                    "turns": turns,
                },
                ensure_ascii=False,
            )
            + "\n"
        )
    return numbers, user_turns, turn_count


def _write_manifest(
    out: Path, files: list[str], pseudonymize: bool, scrub: bool, counts: dict[str, Any], local: LocalTime
) -> None:
    """manifest.json: when and how the export was made, its files and counts."""
    iso = local.iso
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "created_at": iso(now_iso()),
                "timezone": local.name,
                "files": files,
                "pseudonymized": pseudonymize,
                "scrubbed": scrub,
                "counts": {k: v for k, v in counts.items() if k != "pii"},
                "pii_replaced": {TAGS[k]: n for k, n in counts["pii"].items()} if scrub else None,
            },
            ensure_ascii=False,
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )


def _refuse_earlier(out: Path) -> None:
    """`out` must be a new or empty folder: an earlier export is never overwritten."""
    try:
        if out.exists() and not out.is_dir():
            raise InputError(f"{out} is a file, not a folder; give --out a new folder")
        if out.exists() and any(out.iterdir()):
            raise InputError(f"{out} is not empty; give --out a new folder (an earlier export is never overwritten)")
    except OSError as exc:
        raise StorageError(_cannot_write(out, exc)) from exc


def _whole_folder(out: Path, write: Callable[[Path], T]) -> T:
    """Run `write` on a new hidden folder beside `out`, sync what it wrote and rename it to `out` (an empty `out` is
    replaced). On any failure the folder, and the parents made for it, are removed: nothing half-written stays."""
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # deepest first
    partial = out.parent / f".{out.name}.partial-{secrets.token_hex(4)}"
    try:
        partial.mkdir(parents=True)
        result = write(partial)
        for path in partial.iterdir():  # a full disk may only say so here (delayed allocation), not at write()
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        partial.rename(out)
    except BaseException as exc:
        shutil.rmtree(partial, ignore_errors=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):
            raise StorageError(_cannot_write(out, exc)) from exc
        raise
    _sync_folder(out.parent)
    return result


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable; a file system that cannot sync a folder is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _cannot_write(out: Path, exc: OSError) -> str:
    """One line: why the export could not be written to `out`, and what to do."""
    place = out.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = f"the disk of {place} is full; free space there or give --out a folder on another disk"
    elif exc.errno == errno.EROFS:
        why = f"{place} is on a read-only file system; give --out a folder on a writable disk"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = f"no permission to write in {place}; give --out a folder you can write to, or fix its permissions"
    elif exc.errno == errno.ENOTDIR:
        why = f"a part of {out} is a file, not a folder; give --out a new folder"
    elif exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
        why = f"{out} was filled while exporting; give --out a new folder"
    else:
        why = f"{exc.strerror or exc}; give --out a new folder on a writable disk with free space"
    return f"cannot write the export to {out}: {why} (nothing of it was left behind)"


def _aliases(users: list[dict[str, Any]], pseudonymize: bool, clean: Any) -> dict[int, str]:
    """P001, P002, ... or the shown name, scrubbed (a login may be an e-mail address; a scrubbed one keeps its
    participant number so two stay apart)."""
    if pseudonymize:
        return {u["id"]: f"P{i:03d}" for i, u in enumerate(users, 1)}
    alias = {}
    for i, u in enumerate(users, 1):
        shown = shown_name(u["name"])
        cleaned = clean(shown)
        alias[u["id"]] = cleaned if cleaned == shown else f"{cleaned}-P{i:03d}"
    return alias


def _clean_version(version: dict[str, Any], clean: Any) -> dict[str, Any]:
    """A memory version's sentences, cue words and notes' parameters scrubbed (the memory may repeat a phone
    number)."""
    return {
        **version,
        "notes": [{**n, "params": _clean_json(n["params"], clean)} for n in version["notes"]],
        "sentences": [
            {**s, "text": clean(s["text"]), **({"cues": clean(s["cues"])} if s.get("cues") else {})}
            for s in version["sentences"]
        ],
    }


def _clean_changes(changes: dict[str, Any], clean: Any) -> dict[str, Any]:
    """A version diff's texts scrubbed like the sentences they come from."""
    return {
        **{kind: [clean(t) for t in changes[kind]] for kind in ("kept", "added", "removed")},
        "rewritten": [{"old": clean(c["old"]), "new": clean(c["new"])} for c in changes["rewritten"]],
    }


def _clean_json(value: Any, clean: Any) -> Any:
    """Every string inside a JSON value scrubbed (provenance: quoted turns, sentences, summary lines)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list | tuple):
        return [_clean_json(v, clean) for v in value]
    if isinstance(value, dict):
        return {k: _clean_json(v, clean) for k, v in value.items()}
    return value


def _clean_log(log: dict[str, Any], clean: Any) -> dict[str, Any]:
    """A changelog scrubbed; a rewrite's marked parts are made again from the scrubbed texts, so a phone number
    split between an unchanged and a changed part is still found whole."""
    cleaned = _clean_json(log, clean)
    for entry in cleaned["entries"]:
        if entry.get("old") is not None:
            entry["changed"] = [list(part) for part in changed_parts(entry["old"], entry["text"])]
    return cleaned


def shown_name(name: str) -> str:
    """A browser-identity user 'name#key' as 'name#abcdef': the full key is a credential and stays in the database."""
    base, sep, key = name.partition("#")
    return f"{base}#{key[:6]}" if sep else name


def _csv(path: Path, rows: list[dict[str, Any]], fields: tuple[str, ...] | None = None) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields or rows[0]))
        writer.writeheader()
        writer.writerows(rows)
