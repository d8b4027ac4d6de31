"""Erasure that leaves no copy in the database: forgetting a user, or one memory sentence with the turns it came from.

Deleted and overwritten text does not linger: on SQLite every connection runs with `secure_delete` (connection.py),
which zeroes freed space, and each erasure ends with a WAL checkpoint (TRUNCATE) that copies the zeroed pages into
the file and empties the WAL, which still held the text. On Postgres each erasure ends with a VACUUM FULL of the
tables it touched and a CHECKPOINT where permitted (docs/postgres.md: what Postgres still keeps for a while). Each
erasure leaves one audit row in `erasures`: what kind of thing, how many rows of which table, and when; never the text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from memory.store.connection import Connection, now_iso
from memory.store.notes import ERASED, Note, dumps, loads, note
from memory.store.users import Users
from models.errors import InputError

MAIN_TABLES = ("turns", "sessions", "memory_versions", "memory_sentences", "update_jobs")  # the audit's named counts
MARKER = "[삭제됨]"  # what an erased sentence or a redacted turn reads as wherever it was


@dataclass(frozen=True)
class Erased:
    """What one erasure removed: rows per table (the audit row's details) and all of them."""

    kind: str  # user | sentence
    counts: dict[str, int]

    @property
    def rows(self) -> int:
        return sum(self.counts.values())


class Erasure:
    """Forgetting, done so that the text is gone from the file, the WAL and free pages, with an audit row."""

    def __init__(self, conn: Connection, users: Users):
        self.conn = conn
        self.users = users
        self.sentences_erased = 0  # sentence erasures through this store (with users.forgotten: backups drop older)

    def forget_user(self, user_id: int) -> Erased:
        """Delete every row of the user (Users.delete, with the trial records its foreign keys cascade to)."""
        with self.conn.write():
            # every table with a user_id column (the trial tables and the emotion records too, through their
            # foreign keys): how many of its rows go, counted before the delete, on either engine
            per_table = {
                table: int(
                    (self.conn.one(f"select count(*) as n from {table} where user_id = ?", [user_id]) or {})["n"]
                )
                for table in self.conn.tables_with("user_id")
                if table != "erasures"
            }
            counts = {table: per_table.pop(table, 0) for table in MAIN_TABLES}
            self.users.delete(user_id)
            counts["users"] = 1
            counts["other"] = sum(per_table.values())
            erased = Erased("user", counts)
            self._audit(erased, user_id)
        self.conn.after_erasure(["users", *MAIN_TABLES, *per_table])
        return erased

    def lineage(self, user_id: int, texts: Iterable[str]) -> list[dict[str, Any]]:
        """Every sentence row of the user that holds one of `texts`, or is an earlier or later form of one (linked by
        origin_id: a rewritten sentence continues the one it replaced), to a fixed point."""
        rows = self.conn.rows(
            "select id, version_id, origin_id, text from memory_sentences where user_id = ?", [user_id]
        )
        wanted = {t.strip() for t in texts}
        chosen: dict[int, dict[str, Any]] = {}
        while True:
            ids = set(chosen)
            more = [
                r
                for r in rows
                if r["id"] not in chosen and (r["text"] in wanted or r["origin_id"] in ids or _continued(r, chosen))
            ]
            if not more:
                return sorted(chosen.values(), key=lambda r: r["id"])
            for r in more:
                chosen[r["id"]] = r
                wanted.add(r["text"])

    def forget_sentences(
        self, user_id: int, sentences: list[dict[str, Any]], turn_ids: Collection[int], fragments: Iterable[str] = ()
    ) -> Erased:
        """Delete `sentences` (rows from `lineage`) from every version they are in, replace the text of the turns
        `turn_ids` with MARKER, and put MARKER where their text or one of `fragments` (the same fact worded in a
        summary) appears in the user's versions' notes (their parameters) and details and jobs' errors. The versions and
        turns stay (history and counts hold); a version that lost a sentence says so in its notes (an `erased` entry).
        One transaction."""
        texts = sorted({s["text"] for s in sentences} | {f for f in fragments if f.strip()}, key=len, reverse=True)
        versions = {s["version_id"] for s in sentences}
        with self.conn.write():
            # an update running now read the turns before they were redacted, and would commit the fact again;
            # one that starts after this transaction reads them redacted
            if self.conn.one(
                "select id from update_jobs where user_id = ? and status = 'running' and lease_until >= ?",
                [user_id, time.time()],
            ):
                raise InputError(
                    "a memory update of this user is running and read what is being erased; "
                    "try again when it has finished (keem jobs list)",
                    code="erase_update_running",
                )
            # the emotion records of the fact: linked to an erased sentence, naming it, or quoting a redacted turn
            said = [r["text"] for tid in turn_ids for r in self.conn.rows("select text from turns where id = ?", [tid])]
            rows = self.conn.rows("select * from emotion_records where user_id = ?", [user_id])
            erased_ids = {s["id"] for s in sentences}
            gone = [r for r in rows if r["sentence_id"] in erased_ids or r["id"] in _records_saying(rows, texts, said)]
            for r in gone:
                self.conn.execute("delete from emotion_records where id = ?", [r["id"]])
            causes = {f"/{r['cause']}" for r in gone}
            for s in sentences:
                self.conn.execute("delete from memory_sentences where id = ? and user_id = ?", [s["id"], user_id])
            for row in self.conn.rows("select id, notes, details from memory_versions where user_id = ?", [user_id]):
                notes = [Note(n.code, _scrub(n.params, texts)) for n in loads(row["notes"])]
                if row["id"] in versions and all(n.code != ERASED for n in notes):
                    notes.append(note(ERASED))
                details = _without_reports(json.loads(row["details"]) if row["details"] else {}, causes)
                self.conn.execute(
                    "update memory_versions set notes = ?, details = ? where id = ?",
                    [dumps(notes), json.dumps(_scrub(details, texts), ensure_ascii=False), row["id"]],
                )
            for tid in turn_ids:
                self.conn.execute("update turns set text = ? where id = ? and user_id = ?", [MARKER, tid, user_id])
            for job in self.conn.rows(
                "select id, last_error from update_jobs where user_id = ? and last_error is not null", [user_id]
            ):
                scrubbed = _scrub(job["last_error"], texts)
                if scrubbed != job["last_error"]:
                    self.conn.execute("update update_jobs set last_error = ? where id = ?", [scrubbed, job["id"]])
            erased = Erased(
                "sentence",
                {"memory_sentences": len(sentences), "memory_versions": len(versions), "turns": len(turn_ids)},
            )
            self._audit(erased, user_id)
        self.sentences_erased += 1
        self.conn.after_erasure(["memory_sentences", "memory_versions", "turns", "update_jobs", "emotion_records"])
        return erased

    def audit(self, user_id: int | None = None) -> list[dict[str, Any]]:
        """The audit rows, oldest first (of one user, when given)."""
        where, params = ("where user_id = ?", [user_id]) if user_id is not None else ("", [])
        rows = self.conn.rows(f"select * from erasures {where} order by id", params)
        return [{**r, "details": json.loads(r["details"] or "{}")} for r in rows]

    def _audit(self, erased: Erased, user_id: int) -> None:
        self.conn.insert(
            "erasures",
            {
                "kind": erased.kind,
                "user_id": user_id,
                "rows": erased.rows,
                "details": json.dumps(erased.counts),
                "created_at": now_iso(),
            },
        )


def _without_reports(details: dict[str, Any], causes: set[str]) -> dict[str, Any]:
    """A version's details without the emotion records step's report lines ("emotion/cause: ...") about `causes`
    ("/cause" each): the records are being erased, their report goes with them."""
    report = details.get("emotions")
    if not causes or not isinstance(report, dict):
        return details
    kept = {
        k: [x for x in v if not any(c in str(x) for c in causes)] if isinstance(v, list) else v
        for k, v in report.items()
    }
    return {**details, "emotions": kept}


def _records_saying(rows: list[dict[str, Any]], texts: list[str], said: list[str]) -> list[int]:
    """The emotion records (ids) whose cause or quotes hold one of `texts`, or quote one of the turns `said` (those
    turns are being redacted)."""

    def plain(text: str) -> str:
        return "".join(ch for ch in text if ch.isalnum())

    turns = [plain(t) for t in said]
    out = []
    for r in rows:
        fields = [r["cause"], r["quote"] or "", r["ended"] or ""]
        quotes = [plain(q) for q in fields[1:] if q]
        if any(t in f for t in texts for f in fields) or any(q and q in t for q in quotes for t in turns):
            out.append(r["id"])
    return out


def _continued(row: dict[str, Any], chosen: dict[int, dict[str, Any]]) -> bool:
    """Whether a chosen sentence continues `row` (row is an earlier form of it)."""
    return any(c["origin_id"] == row["id"] for c in chosen.values())


def _scrub(value: Any, texts: list[str]) -> Any:
    """`value` (a string, or JSON of lists and dicts) with every occurrence of `texts` replaced by MARKER."""
    if isinstance(value, str):
        for text in texts:
            value = value.replace(text, MARKER)
        return value
    if isinstance(value, list):
        return [_scrub(v, texts) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, texts) for k, v in value.items()}
    return value
