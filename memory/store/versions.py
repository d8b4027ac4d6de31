"""Memory versions: each a numbered, immutable list of sentences (text, vector, provenance) of one user."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.store.connection import Connection, now_iso
from memory.store.emotions import EmotionRecord, Emotions, follow
from memory.store.notes import Note, dumps, loads, note
from memory.store.queue import OWNED, job_taken
from memory.store.rebase import USER_AUTHORS, rebase_update, rebase_user_change
from memory.store.sentences import Sentence, Version
from models.errors import InputError, MemoryChangedError, UpdateError


def _blob(vector: np.ndarray | None) -> bytes | None:
    """A vector as the float32 bytes stored beside its text."""
    return None if vector is None else np.asarray(vector, np.float32).tobytes()


def _vector(blob: bytes | None) -> np.ndarray | None:
    return np.frombuffer(blob, dtype=np.float32) if blob else None


class Versions:
    """A user's memory versions; a new one is written whole, in one transaction, and never changed after."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.emotions = Emotions(conn)

    def _version(self, row: dict[str, Any] | None) -> Version | None:
        if row is None:
            return None
        sentences = tuple(
            Sentence(
                text=s["text"],
                provenance=s["provenance"],
                origin_id=s["origin_id"],
                id=s["id"],
                embedder=s["embedder"],
                cues=s["cues"],
                embedding=_vector(s["embedding"]),
                cue_embedding=_vector(s["cue_embedding"]),
                sources=json.loads(s["sources"]) if s.get("sources") else None,
                dates=tuple(json.loads(s["dates"])) if s.get("dates") else (),
            )
            for s in self.conn.rows(
                "select * from memory_sentences where version_id = ? order by position", [row["id"]]
            )
        )
        details = json.loads(row["details"]) if row.get("details") else {}
        return Version(
            id=row["id"],
            user_id=row["user_id"],
            number=row["number"],
            session_id=row["session_id"],
            strategy=row["strategy"],
            status=row["status"],
            model_spec=row["model_spec"],
            prompt_hash=row["prompt_hash"],
            author=row["author"],
            created_at=row["created_at"],
            sentences=sentences,
            notes=loads(row["notes"]),
            details=details,
            records=tuple(self.emotions.of_version(row["id"])),
        )

    def latest_id(self, user_id: int) -> int | None:
        row = self.conn.one("select id from memory_versions where user_id = ? order by number desc limit 1", [user_id])
        return row["id"] if row else None

    def latest(self, user_id: int) -> Version | None:
        return self._version(
            self.conn.one("select * from memory_versions where user_id = ? order by number desc limit 1", [user_id])
        )

    def get(self, user_id: int, number: int) -> Version:
        found = self._version(
            self.conn.one("select * from memory_versions where user_id = ? and number = ?", [user_id, number])
        )
        if found is None:
            raise InputError(f"this user has no memory version {number}; see: keem memory history")
        return found

    def as_of(self, user_id: int, before: str) -> Version | None:
        """The version that was the user's memory at the stored (UTC ISO) time `before`: the last one made by then."""
        return self._version(
            self.conn.one(
                "select * from memory_versions where user_id = ? and created_at <= ? order by number desc limit 1",
                [user_id, before],
            )
        )

    def of_user(self, user_id: int) -> list[Version]:
        rows = self.conn.rows("select * from memory_versions where user_id = ? order by number", [user_id])
        return [v for v in (self._version(r) for r in rows) if v is not None]

    def _job_version(self, job_id: int, owner: str | None) -> Version | None:
        """The version a job committed already (None: none yet), inside a commit's transaction; JobTakenError when
        `owner` no longer runs the job (taken over while this copy computed: its new owner commits)."""
        done = self.conn.one("select version_id from update_jobs where id = ? and version_id is not null", [job_id])
        if done is not None:
            existing = self._version(self.conn.one("select * from memory_versions where id = ?", [done["version_id"]]))
            if existing is not None:
                return existing
        if owner is not None and self.conn.one(f"select id from update_jobs where {OWNED}", [job_id, owner]) is None:
            raise job_taken(self.conn, job_id)
        return None

    def commit(
        self,
        user_id: int,
        sentences: list[Sentence],
        *,
        base: int | None,
        strategy: str,
        status: str,
        author: str,
        session_id: int | None = None,
        model_spec: str | None = None,
        prompt_hash: str | None = None,
        notes: Sequence[Note] = (),
        details: dict[str, Any] | None = None,
        job_id: int | None = None,
        records: list[EmotionRecord] | None = None,
        owner: str | None = None,
    ) -> Version:
        """Write a new version with all its sentences in one transaction (and finish its job, if any).

        `job_id` and `owner`: the update job this version finishes, and the process running it (memory/store/
        queue.py). A job that has its version already returns that version (a job run twice commits once); a job
        `owner` no longer runs (taken over when its lease ran out) raises JobTakenError and writes nothing.

        `base` is the number of the version the writer started from (None: the user had none). It is compared with
        the user's latest version in the same transaction; when they differ the change is rebased onto the latest
        or refused with MemoryChangedError (memory/store/rebase.py has the rule), never written over what came
        since. The version's details record its base, and the rebase when there was one. Refuses an empty
        memory: a version is never empty.

        `notes`: why the version is as it is, as codes (memory/store/notes.py); a rebase adds its own.

        `records`: the version's emotion-and-cause records (memory/emotions.py), each linked to its sentence by
        text; None (a user's edit, an import) carries the latest version's records, following their sentences.
        """
        if not sentences or not all(s.text.strip() for s in sentences):
            raise UpdateError("refusing to commit an empty memory or an empty sentence; the previous version stays")
        details = {**(details or {}), "base": base}
        with self.conn.write():
            if job_id is not None and (existing := self._job_version(job_id, owner)) is not None:
                return existing  # one version per session update: a job run twice commits once
            last = self.conn.one("select max(number) as n from memory_versions where user_id = ?", [user_id])
            latest = (last or {}).get("n")
            if records is None:
                records = follow(self.emotions.latest(user_id), sentences)
            if latest != base:
                sentences, details, notes = self._rebase(user_id, base, author, sentences, details, notes)
            number = int(latest or 0) + 1
            version_id = self.conn.insert(
                "memory_versions",
                {
                    "user_id": user_id,
                    "number": number,
                    "session_id": session_id,
                    "strategy": strategy,
                    "status": status,
                    "model_spec": model_spec,
                    "prompt_hash": prompt_hash,
                    "author": author,
                    "notes": dumps(notes),
                    "details": json.dumps(details, ensure_ascii=False),
                    "created_at": now_iso(),
                },
            )
            self.conn.insert_many(
                "memory_sentences",
                [
                    {
                        "version_id": version_id,
                        "user_id": user_id,
                        "position": i,
                        "text": s.text.strip(),
                        "embedding": _blob(s.embedding),
                        "embedder": s.embedder,
                        "provenance": s.provenance,
                        "origin_id": s.origin_id,
                        "cues": s.cues,
                        "cue_embedding": _blob(s.cue_embedding),
                        "sources": json.dumps(s.sources, ensure_ascii=False) if s.sources else None,
                        "dates": json.dumps(list(s.dates), ensure_ascii=False) if s.dates else None,
                    }
                    for i, s in enumerate(sentences)
                ],
            )
            self.emotions.write(user_id, version_id, records)
            if job_id is not None:
                self.conn.execute(
                    "update update_jobs set status = 'done', stage = ?, version_id = ?, owner = null, "
                    "updated_at = ? where id = ?",
                    [status, version_id, now_iso(), job_id],
                )
        committed = self._version(self.conn.one("select * from memory_versions where id = ?", [version_id]))
        assert committed is not None
        return committed

    def _rebase(
        self,
        user_id: int,
        base: int | None,
        author: str,
        sentences: list[Sentence],
        details: dict[str, Any],
        notes: Sequence[Note],
    ) -> tuple[list[Sentence], dict[str, Any], list[Note]]:
        """`sentences`, computed from version `base`, replayed onto the user's latest version (inside commit's
        transaction), with the rebase recorded in the details and the notes."""
        since = [v for v in self.of_user(user_id) if v.number > (base or 0)]
        if not since or (base is not None and since[0].number != base + 1):
            raise InputError(f"this user has no memory version {base} to start from; reload the memory and try again")
        previous = self.get(user_id, base) if base is not None else None
        onto = since[-1].number
        if author in USER_AUTHORS:
            rebased = rebase_user_change(previous, since, sentences)
        elif all(v.author in USER_AUTHORS for v in since):
            rebased = rebase_update(previous, since, sentences)
        else:
            raise MemoryChangedError(
                f"an update computed from memory version {base or 0} cannot commit: version {onto} came from another "
                "update since; compute it again from the latest version",
                code="memory_recompute",
                base=base or 0,
                latest=onto,
            )
        if not rebased.sentences:
            raise UpdateError("the change would leave the memory empty; the latest version stays")
        details = {**details, "rebase": {"onto": onto, **rebased.report}}
        remark = (
            note("rebased_user", base=base or 0, onto=onto)
            if author in USER_AUTHORS
            else note("rebased_update", onto=onto)
        )
        return rebased.sentences, details, [*notes, remark]
