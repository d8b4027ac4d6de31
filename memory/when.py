"""A query that names a time finds the memory of that time: "지난주에 뭐 했다고 했지?" ranks what was said last week,
and what the memory dates to last week, above the rest.

A memory sentence belongs to the days it names (memory/dates.py stores them absolute: "2026년 11월 30일에 ...") and
to the day it was said: the date of the session that wrote it (its provenance, memory/provenance.py: `session`), of
a person's own edit in the memory tab (`at`), or the one an imported corpus gives (`said`). The query's days are the
times it says, resolved against the user's today (memory/dates.py `find`: 어제, 지난주, 작년 여름, 12월 8일) and,
for English memories, absolute dates written out ("on 16 June, 2023", "in July 2023", "in 2023"). A sentence whose
days meet the query's gets `WEIGHT` added to its fused score (memory/fusion.py), the size of the lexical boost: a
named time decides between sentences that are otherwise close, and never lifts one about something else over the
one the query means.

What was said a few days after it happened ("지난 주말에 ..." told on Monday) still counts: a sentence said up to
`SAID_AFTER` days after the query's last day meets it. Measured on LoCoMo (benchmarks/retrieval.py; docs/benchmarks.md):
its questions that name a date ("What did Maria share on 16 June, 2023?") find the observation of that session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np

from memory.dates import find

WEIGHT = 0.05  # LoCoMo: 0.02 gained 0.006-0.008, 0.05 and 0.1 0.013-0.017; the lexical boost's size (fusion.py)
SAID_AFTER = timedelta(days=7)  # LoCoMo: 0 days 0.013, 7 days 0.017, 31 days 0.011

Days = tuple[date, date]
WHEN_KEYS = ("session", "said", "step", "at")  # what `said_on` reads of a sentence's sources

_MONTHS = "january february march april may june july august september october november december".split()
_MONTH = "|".join(_MONTHS + [m[:3] for m in _MONTHS if len(m) > 3] + ["sept"])
# Written-out English dates only: a relative English word ("last week") is not resolved, and a bare month ("in
# May") is left alone (it is also a verb, and has no year to tell which May).
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:in|of|during|since)\s+((?:19|20)\d\d)\b", re.IGNORECASE)
_ISO = re.compile(r"\d{4}-\d{1,2}-\d{1,2}")
MAX_CHARS = 500  # a query's time is in its first words; a long paste is not read for dates


def _month(word: str) -> int:
    word = word.lower().rstrip(".")
    return next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(word[:3]))


def _month_days(year: int, month: int) -> Days:
    end = date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)
    return date(year, month, 1), end


def english(text: str) -> list[Days]:
    """The written-out dates of an English text, each as the days it covers (a day that does not exist is skipped,
    its month and year still count)."""
    out: list[Days] = []
    taken: list[tuple[int, int]] = []

    def add(span: tuple[int, int], days: Days) -> None:
        if not any(span[0] < b and a < span[1] for a, b in taken):
            taken.append(span)
            out.append(days)

    for pattern, day_at, month_at in ((_DAY_MONTH_YEAR, 1, 2), (_MONTH_DAY_YEAR, 2, 1)):
        for m in pattern.finditer(text):
            try:
                day = date(int(m[3]), _month(m[month_at]), int(m[day_at]))
            except ValueError:
                continue
            add(m.span(), (day, day))
    for m in _MONTH_YEAR.finditer(text):
        add(m.span(), _month_days(int(m[2]), _month(m[1])))
    for m in _YEAR.finditer(text):
        add(m.span(1), (date(int(m[1]), 1, 1), date(int(m[1]), 12, 31)))
    return out


def asked(query: str, today: date) -> list[Days]:
    """The days a query names: its Korean times resolved against `today`, and written-out English dates."""
    query = query[:MAX_CHARS]
    return [(s.first, s.last) for s in find(query, today)] + english(query)


def held(text: str) -> list[Days]:
    """The days a stored sentence names: only absolute ones (memory/dates.py writes times so), since a relative word
    left in an old sentence ("내일") meant a day that is not today's tomorrow, and a birthday's month and day come
    back every year."""
    spans = find(text, date.today(), tense=False)  # no Kiwi per sentence: a year fixes the days whatever the tense
    return [(s.first, s.last) for s in spans if s.absolute or _ISO.match(text, s.start)] + english(text)


def said_on(
    sources: Mapping[str, Any] | None, session_days: Mapping[int, date], day: Callable[[str], date] | None = None
) -> date | None:
    """The day a sentence was said: its session's date; the day a corpus says it was said (`said`, an import's:
    evaluation/corpora/locomo.py); or the day a person wrote it in the memory tab (step `user`, `at`, a stored time
    put where the user lives by `day`). An import's or a restore's `at` is when it was done, not when it was said:
    no day."""
    if not sources:
        return None
    if (session := sources.get("session")) is not None:
        return session_days.get(session)
    try:
        if isinstance(said := sources.get("said"), str):
            return date.fromisoformat(said[:10])
        if sources.get("step") == "user" and isinstance(at := sources.get("at"), str):
            return day(at) if day else datetime.fromisoformat(at).date()
    except ValueError:
        return None
    return None


def meets(wanted: Iterable[Days], days: Sequence[Days], said: date | None) -> bool:
    """True when a sentence's own days, or the day it was said (up to SAID_AFTER late), meet any wanted days."""
    for first, last in wanted:
        if any(a <= last and first <= b for a, b in days):
            return True
        if said is not None and first <= said <= last + SAID_AFTER:
            return True
    return False


def boost(wanted: list[Days], days: Sequence[Sequence[Days]], said: Sequence[date | None]) -> np.ndarray:
    """WEIGHT for each sentence (in order) whose days meet the query's, else 0; all 0 when it names no time."""
    out = np.zeros(len(days), dtype=np.float32)
    if wanted:
        for i, (own, when) in enumerate(zip(days, said)):
            if meets(wanted, own, when):
                out[i] = WEIGHT
    return out
