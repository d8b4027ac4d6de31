"""The update's time step, every strategy's and the dataset builder's: times written absolute, past plans past.

After a strategy has written the new memory (memory/updaters/steps.py `with_records` calls this before the
emotion records, so they link to the final texts), each sentence is put right in time (memory/dates.py):
- a sentence this session wrote (added, rewritten) has its relative times resolved against the session's date
  ("다음 주 화요일" said on 2026-12-03 -> "2026년 12월 8일"), the words said kept in `Sentence.dates`;
- a sentence carried from the previous memory keeps what was said for its times; one still in relative words (a
  memory written before times were resolved, or by hand) is left in those words: when they were said is not
  known (the previous session's date is only when it was last carried), and a wrong date is worse than none;
- any sentence whose every time has passed by the session's date and that still reads as a plan is put in the
  past ("2026년 12월 8일에 시험이 있다" -> "... 있었다"): marked `rewritten`, continuing the sentence it was, so the
  changelog shows it and its emotion records follow it.
A sentence with no time it knows is left exactly as it was: nothing is dropped, nothing raises.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date
from typing import Any

from memory.dates import anchor, carry, settle
from memory.store import Sentence

CARRIED = ("kept", "restored")
logger = logging.getLogger(__name__)


def put_in_time(
    previous: list[Sentence], sentences: list[Sentence], session_date: date | None
) -> tuple[list[Sentence], dict[str, Any]]:
    """(the sentences in time, a report of what was resolved and what was put in the past, for the details)."""
    if session_date is None:
        return sentences, {}
    said = [entry for s in previous for entry in s.dates]
    resolved: list[dict[str, str]] = []
    settled: list[dict[str, str]] = []
    out = []
    for s in sentences:
        carried = s.provenance in CARRIED
        try:
            text, new = (s.text, []) if carried else anchor(s.text, session_date)
            past = settle(text, session_date)
        except Exception as exc:  # a time the rules cannot read stays as said; the update still lands
            # (never the sentence in the log: an erasure must leave no copy of it anywhere)
            logger.warning("the times of a memory sentence were left as written (%s: a bug to report)", type(exc))
            out.append(s)
            continue
        resolved += new
        entries = list(s.dates) if carried else []
        entries += [e for e in carry(said, text) if e not in entries] + new
        if past != text:
            settled.append({"from": text, "to": past})
        if past != s.text:  # a carried sentence changed: now a rewrite of what it was
            origin = s.origin_id if s.origin_id is not None else s.id
            s = replace(s, text=past, provenance="rewritten" if carried else s.provenance, origin_id=origin, id=None)
            s = replace(s, embedding=None, cues=None, cue_embedding=None)
        out.append(replace(s, dates=tuple(entries)))
    report = {k: v for k, v in (("resolved", resolved), ("settled", settled)) if v}
    return out, report
