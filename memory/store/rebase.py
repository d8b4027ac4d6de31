"""Compare-and-swap for memory versions: a change computed from an older version (its base), rebased onto the
user's latest version, or refused.

Every writer states the version it started from (memory/store/versions.py Versions.commit `base`). When that is no
longer the latest, the versions since the base decide, with sentences matched by their origin links (what each
continues; the same rule as memory/diff.py):

- an update (author "updater") on top of versions the user wrote since (authors "user" and "import") is rebased
  and the user's changes win: a sentence the user deleted stays deleted even if the update kept or rewrote it, an
  edited one stays as the user wrote it, an added one stays; the rest is the update's;
- an update after another update is refused (MemoryChangedError, code `memory_recompute`): memory/jobs.py computes
  it again from the latest version;
- a user's own change (the memory tab, `keem memory import`) is replayed onto the latest version when it still
  applies: an addition always, a deletion or an edit when its sentence is unchanged since the base (or, for a
  deletion, gone already). A deletion or an edit of a sentence someone changed meanwhile is refused (code
  `memory_changed`): the user reloads and decides again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memory.store.sentences import Sentence, Version
from models.errors import MemoryChangedError

USER_AUTHORS = ("user", "import")


def continuations(previous: Sequence[Sentence], current: Sequence[Sentence]) -> list[int | None]:
    """For each sentence of `current`, the id of the sentence of `previous` it continues, or None (new).

    Its origin when that is in `previous`; else the first not yet continued previous sentence with the same text
    (versions written before origins were recorded).
    """
    old = {s.id: s.text for s in previous if s.id is not None}
    unclaimed = {text: sid for sid, text in reversed(old.items())}
    continued: set[int] = set()
    out: list[int | None] = []
    for s in current:
        origin = s.origin_id if s.origin_id in old else None
        if origin is None and s.text in unclaimed and unclaimed[s.text] not in continued:
            origin = unclaimed[s.text]
        out.append(origin)
        if origin is not None:
            continued.add(origin)
    return out


def descendants(base: Version | None, since: Sequence[Version]) -> dict[int | None, list[Sentence]]:
    """The latest version's sentences (the last of `since`) grouped by the base sentence each descends from;
    None holds those added since the base."""
    lineage: dict[int | None, int | None] = {s.id: s.id for s in (base.sentences if base else ()) if s.id is not None}
    previous: Sequence[Sentence] = base.sentences if base else ()
    for version in since:
        origins = continuations(previous, version.sentences)
        lineage = {s.id: (lineage.get(o) if o is not None else None) for s, o in zip(version.sentences, origins)}
        previous = version.sentences
    groups: dict[int | None, list[Sentence]] = {}
    for s in previous:
        groups.setdefault(lineage.get(s.id), []).append(s)
    return groups


def _carried(s: Sentence) -> Sentence:
    """A sentence of the latest version as it continues into the new one (memory/updaters/base.py carry_over)."""
    return replace(s, provenance="kept", origin_id=s.id, id=None)


@dataclass
class Rebased:
    """A change replayed onto the latest version: its sentences (origins in the latest version) and a report of
    counts (never texts: an erased sentence must not survive in a version's details)."""

    sentences: list[Sentence]
    report: dict[str, Any] = field(default_factory=dict)


def rebase_update(base: Version | None, since: Sequence[Version], new: Sequence[Sentence]) -> Rebased:
    """An update computed from `base`, onto the latest of `since` (all the user's own versions): the user's changes
    since the base win, the rest is the update's."""
    groups = descendants(base, since)
    base_text = {s.id: s.text for s in (base.sentences if base else ())}
    origins = continuations(base.sentences if base else (), new)
    out: list[Sentence] = []
    done: set[int] = set()
    deleted = edited = 0
    for n, b in zip(new, origins):
        if b is None:
            out.append(n)  # the update's own addition
            continue
        d = groups.get(b, [])
        if not d:
            if b not in done:  # the user deleted it: it stays deleted, whatever the update made of it
                deleted += 1
        elif len(d) == 1 and d[0].text == base_text[b]:
            out.append(replace(n, origin_id=d[0].id))  # untouched by the user: the update's version of it
        elif b not in done:
            out.extend(_carried(s) for s in d)  # the user edited it: their text, not the update's
            edited += 1
        done.add(b)
    for b, d in groups.items():  # what the update dropped but the user edited meanwhile stays as edited
        if b is not None and b not in done and not (len(d) == 1 and d[0].text == base_text.get(b)):
            out.extend(_carried(s) for s in d)
            edited += 1
    have = {s.text for s in out}
    added = [s for s in groups.get(None, []) if s.text not in have]
    out.extend(_carried(s) for s in added)
    return Rebased(out, {"user_deletions_kept": deleted, "user_edits_kept": edited, "user_additions_kept": len(added)})


def rebase_user_change(base: Version | None, since: Sequence[Version], mine: Sequence[Sentence]) -> Rebased:
    """A user's own change computed from `base` (deletions, edits, additions), replayed onto the latest of `since`.

    Raises MemoryChangedError (code `memory_changed`) when it deletes or edits a sentence changed since the base.
    """
    latest = since[-1]
    groups = descendants(base, since)
    base_text = {s.id: s.text for s in (base.sentences if base else ())}
    origins = continuations(base.sentences if base else (), mine)
    my_versions: dict[int, list[Sentence]] = {}
    for n, b in zip(mine, origins):
        if b is not None:
            my_versions.setdefault(b, []).append(n)
    deleted = {b for b in base_text if b not in my_versions}
    edited = {b for b, ns in my_versions.items() if [n.text for n in ns] != [base_text[b]]}
    for b in deleted | edited:
        d = groups.get(b, [])
        unchanged = len(d) == 1 and d[0].text == base_text[b]
        if not unchanged and not (b in deleted and not d):
            raise MemoryChangedError(
                f"memory changed since version {base.number if base else 0} (now {latest.number}) where this "
                "change applies; reload the memory and make the change again",
                code="memory_changed",
                number=latest.number,
            )
    lineage = {s.id: b for b, d in groups.items() for s in d}
    out: list[Sentence] = []
    for s in latest.sentences:
        b = lineage.get(s.id)
        if b in deleted:
            continue
        if b is not None and b in edited:
            out.extend(replace(n, origin_id=s.id) for n in my_versions[b])
        else:
            out.append(_carried(s))
    have = {s.text for s in out}
    additions = [n for n, b in zip(mine, origins) if b is None and n.text not in have]
    out.extend(additions)
    report = {"user_deletions": len(deleted), "user_edits": len(edited), "user_additions": len(additions)}
    return Rebased(out, report)
