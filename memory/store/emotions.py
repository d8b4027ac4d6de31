"""Emotion-and-cause records stored with each memory version (migration m011), and the openings that asked about
them. What the records say and how they change is memory/emotions.py's; here they are only kept."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memory.store.connection import Connection, now_iso

STATUSES = ("ongoing", "resolved", "past")


@dataclass(frozen=True)
class EmotionRecord:
    """One emotion with its cause, as of one memory version. `key` stays the same from version to version."""

    key: str
    emotion: str  # the user's own word, or a short Korean label
    cause: str
    status: str = "ongoing"  # ongoing | resolved | past
    sentence: str = ""  # the memory sentence it belongs to ("" once that sentence is gone)
    quote: str = ""  # the user's words when it was first recorded (`ended` holds those that changed its status)
    first_seen: str = ""  # ISO date of the session it was first said in
    last_seen: str = ""  # and of the last session that spoke of it
    first_session: int | None = None
    last_session: int | None = None
    due: str | None = None  # ISO date of the cause when it has one (an interview, an appointment)
    ended: str | None = None  # how it ended: the user's words when it was resolved or became past
    ended_at: str | None = None  # ISO date of that session
    sentence_id: int | None = None  # the stored sentence row (set when loaded; follows through origin_id)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "emotion": self.emotion,
            "cause": self.cause,
            "status": self.status,
            "since": self.first_seen,
            "last_seen": self.last_seen,
            "first_session": self.first_session,
            "last_session": self.last_session,
            "due": self.due,
            "sentence": self.sentence,
            "quote": self.quote,
            "ended": self.ended,
            "ended_at": self.ended_at,
        }


def follow(records: Iterable[EmotionRecord], sentences: Sequence[Any]) -> list[EmotionRecord]:
    """The records with each one's sentence as it is in `sentences` (a new version's, not yet stored): the
    sentence that continues the record's (origin_id), else the same text, else "" (the sentence is gone; the record
    stays as history)."""
    by_origin = {s.origin_id: s.text for s in sentences if s.origin_id is not None}
    texts = {s.text for s in sentences}
    followed = []
    for r in records:
        text = by_origin.get(r.sentence_id) if r.sentence_id is not None else None
        if text is None:
            text = r.sentence if r.sentence in texts else ""
        followed.append(replace(r, sentence=text, sentence_id=None))
    return followed


def link(records: Iterable[EmotionRecord], sentences: Sequence[Any]) -> list[EmotionRecord]:
    """The records linked to the stored sentences (with ids) that hold their text, as Emotions.write links them: for
    callers that keep versions in memory (the long-horizon benchmark), so the next update can `follow` them."""
    ids = {s.text: s.id for s in sentences}
    return [replace(r, sentence_id=ids.get(r.sentence)) for r in records]


class Emotions:
    """The records of a version, written in the version's own transaction (Versions.commit)."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def write(self, user_id: int, version_id: int, records: Iterable[EmotionRecord]) -> None:
        """Store `records` with the version; each links to the version's sentence with its text (none if absent)."""
        ids = {
            r["text"]: r["id"]
            for r in self.conn.rows("select id, text from memory_sentences where version_id = ?", [version_id])
        }
        self.conn.insert_many(
            "emotion_records",
            [
                {
                    "version_id": version_id,
                    "user_id": user_id,
                    "position": i,
                    "key": r.key,
                    "emotion": r.emotion,
                    "cause": r.cause,
                    "status": r.status,
                    "sentence_id": ids.get(r.sentence.strip()),
                    "quote": r.quote,
                    "first_seen": r.first_seen,
                    "last_seen": r.last_seen,
                    "first_session": r.first_session,
                    "last_session": r.last_session,
                    "due": r.due,
                    "ended": r.ended,
                    "ended_at": r.ended_at,
                }
                for i, r in enumerate(records)
            ],
        )

    def of_version(self, version_id: int) -> list[EmotionRecord]:
        rows = self.conn.rows(
            "select e.*, s.text as sentence from emotion_records e left join memory_sentences s on s.id = e.sentence_id"
            " where e.version_id = ? order by e.position",
            [version_id],
        )
        return [
            EmotionRecord(
                key=r["key"],
                emotion=r["emotion"],
                cause=r["cause"],
                status=r["status"],
                sentence=r["sentence"] or "",
                quote=r["quote"],
                first_seen=r["first_seen"],
                last_seen=r["last_seen"],
                first_session=r["first_session"],
                last_session=r["last_session"],
                due=r["due"],
                ended=r["ended"],
                ended_at=r["ended_at"],
                sentence_id=r["sentence_id"],
            )
            for r in rows
        ]

    def latest(self, user_id: int) -> list[EmotionRecord]:
        """The records of the user's latest version ([] when none)."""
        row = self.conn.one("select id from memory_versions where user_id = ? order by number desc limit 1", [user_id])
        return self.of_version(row["id"]) if row else []

    # -- openings ------------------------------------------------------------------------------------
    def opened(self, user_id: int, session_id: int, record_key: str, turn_id: int | None) -> None:
        """Remember that this session's opening asked about `record_key`."""
        self.conn.execute(
            "insert into session_openings (session_id, user_id, record_key, turn_id, created_at) "
            "values (?, ?, ?, ?, ?) "
            "on conflict (session_id) do update set user_id = excluded.user_id, record_key = excluded.record_key, "
            "turn_id = excluded.turn_id, created_at = excluded.created_at",
            [session_id, user_id, record_key, turn_id, now_iso()],
        )

    def last_opening(self, user_id: int, before_session: int) -> str | None:
        """The record the opening of the user's previous session asked about (the latest earlier session in which
        the user said something: an opening nobody answered does not count); None when it had no opening."""
        row = self.conn.one(
            "select o.record_key from sessions s left join session_openings o on o.session_id = s.id "
            "where s.user_id = ? and s.id < ? "
            "and exists (select 1 from turns t where t.session_id = s.id and t.role = 'user') "
            "order by s.id desc limit 1",
            [user_id, before_session],
        )
        return row["record_key"] if row else None
