"""`keem trial export`: what a multi-session user trial collected, per participant, ready for analysis.

Writes into a new folder:
  participants.csv       one row per participant: strategy, sessions, user turns, first and last session, versions
  sessions.jsonl         one line per session with its turns (role, text, time) and how it ended
  memory_versions.jsonl  one line per memory version with its sentences (provenance, cue words)
With --pseudonymize, names become P001, P002, ... (by order of first use) and key.csv maps them back: keep it
apart from the data. Turn texts are exported as typed; they may still name people. A browser-identity user
("name#key", KEEM_IDENTITY=browser) appears with only the key's first 6 characters: the full key is a credential.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from memory.store import Store
from models.errors import InputError

FILES = ("participants.csv", "sessions.jsonl", "memory_versions.jsonl")


def export(store: Store, out: Path, pseudonymize: bool = False) -> dict[str, int]:
    """Write the export files into `out` (which must not hold an earlier export); returns counts."""
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} is not empty; give --out a new folder (an earlier export is never overwritten)")
    users = store.users()
    if not users:
        raise InputError("the database has no participants yet; check --db / KEEM_DB")
    out.mkdir(parents=True, exist_ok=True)
    alias = {u["id"]: f"P{i:03d}" if pseudonymize else _shown(u["name"]) for i, u in enumerate(users, 1)}
    counts = {"participants": len(users), "sessions": 0, "turns": 0, "versions": 0}
    rows: list[dict[str, Any]] = []
    with open(out / "sessions.jsonl", "w", encoding="utf-8") as sessions_file, \
            open(out / "memory_versions.jsonl", "w", encoding="utf-8") as versions_file:
        for user in users:
            sessions, versions = store.sessions(user["id"]), store.versions(user["id"])
            user_turns = 0
            for s in sessions:
                turns = [{"role": t["role"], "text": t["text"], "at": t["created_at"]} for t in store.turns(s["id"])]
                user_turns += sum(t["role"] == "user" for t in turns)
                counts["turns"] += len(turns)
                sessions_file.write(json.dumps(
                    {"participant": alias[user["id"]], "session": s["id"], "strategy": s["strategy"],
                     "chat_model": s["chat_model"], "started_at": s["started_at"], "ended_at": s["ended_at"],
                     "end_reason": s["end_reason"], "turns": turns}, ensure_ascii=False) + "\n")
            for v in versions:
                versions_file.write(json.dumps({"participant": alias[user["id"]], **v.as_json()},
                                               ensure_ascii=False) + "\n")
            counts["sessions"] += len(sessions)
            counts["versions"] += len(versions)
            rows.append({"participant": alias[user["id"]],
                         "strategy": user["strategy"] or (sessions[-1]["strategy"] if sessions else ""),
                         "sessions": len(sessions), "user_turns": user_turns,
                         "first_session": sessions[0]["started_at"] if sessions else "",
                         "last_session": sessions[-1]["started_at"] if sessions else "",
                         "memory_versions": len(versions)})
    _csv(out / "participants.csv", rows)
    if pseudonymize:
        _csv(out / "key.csv", [{"participant": alias[u["id"]], "name": _shown(u["name"])} for u in users])
    return counts


def _shown(name: str) -> str:
    """A browser-identity user 'name#key' as 'name#abcdef': the full key is a credential and stays in the database."""
    base, sep, key = name.partition("#")
    return f"{base}#{key[:6]}" if sep else name


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
