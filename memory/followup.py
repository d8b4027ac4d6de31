"""What a friend would ask about first: the emotion records due for a follow-up at a session's start.

Due: an ongoing record whose cause has no date (a worry, an illness not yet recovered), or whose date has passed
(an interview, an exam, a trip: the date resolved against the session it was said in, memory/emotions.py). Never a
resolved or past record, never one whose date is still to come, and never the record the previous opening asked
about (no same follow-up twice in a row). The app and `keem session` both open with `choose`
(chatbot/opening.py); the long-horizon benchmark scores it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from memory.store.emotions import EmotionRecord
from memory.text import to_date


def is_due(record: EmotionRecord, today: date) -> bool:
    """Whether a friend would ask about this record today."""
    if record.status != "ongoing":
        return False
    due = _day(record.due)
    seen = _day(record.last_seen)
    if seen is not None and seen >= today:  # said today: nothing to follow up yet
        return False
    return due is None or due < today


def due_records(records: Iterable[EmotionRecord], today: date) -> list[EmotionRecord]:
    """The records due today, the one to ask first first: those whose date has passed (most recent date first),
    then the others (most recently spoken of first)."""
    due = [r for r in records if is_due(r, today)]
    return sorted(due, key=lambda r: (r.due is None, -_ordinal(r.due), -_ordinal(r.last_seen)))


def choose(records: Iterable[EmotionRecord], today: date, last_asked: str | None = None) -> EmotionRecord | None:
    """The one record to open with today, or None when nothing is due (or only what the last opening asked)."""
    return next((r for r in due_records(records, today) if r.key != last_asked), None)


def _day(value: str | None) -> date | None:
    try:
        return to_date(value) if value else None
    except ValueError:
        return None


def _ordinal(value: str | None) -> int:
    day = _day(value)
    return day.toordinal() if day else 0
