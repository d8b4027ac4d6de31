"""Taking back what an update did, as the user's own change: one dropped sentence ("되살리기", `keem memory restore`)
or a whole update ("이번 갱신 되돌리기", `keem memory revert`). Each is a new version by the user, written through
the same compare-and-swap as every writer (memory/store/rebase.py): the version a person acted on is the commit's
base, so a change made meanwhile by another tab or an update is kept or the undo is refused, never overwritten.
The undone version stays in the history."""

from __future__ import annotations

from dataclasses import replace

from memory.engine import MemoryEngine
from memory.store import Sentence, Version, note, now_iso
from memory.store.emotions import follow
from memory.updaters.base import carry_over
from models.errors import InputError


def dropped_sentence(engine: MemoryEngine, user_id: int, sentence_id: int) -> Sentence:
    """A sentence of one of the user's earlier versions (by id), refused when it is not the user's."""
    row = engine.store.one(
        "select v.number from memory_sentences s join memory_versions v on v.id = s.version_id "
        "where s.id = ? and s.user_id = ?",
        [sentence_id, user_id],
    )
    if row is None:
        raise InputError(
            f"no memory version of this user held sentence {sentence_id}; see: keem memory changes",
            code="restore_unknown_sentence",
        )
    version = engine.store.versions.get(user_id, row["number"])
    return next(s for s in version.sentences if s.id == sentence_id)


def restore(engine: MemoryEngine, user_id: int, sentence: Sentence) -> Version:
    """A new version by the user: the latest memory plus `sentence` (a dropped one), with its sources kept and the
    time it was brought back. An addition applies to whatever is latest when it commits (as the memory tab's
    additions do), so its base is the latest now."""
    latest = engine.current(user_id)
    if latest is not None and sentence.text in latest.texts:
        raise InputError("that sentence is in the current memory already", code="restore_present")
    sources = {**(sentence.sources or {}), "step": "restore", "at": now_iso()}
    back = replace(sentence, provenance="user", origin_id=sentence.id, id=None, sources=sources)
    return engine.commit(
        user_id,
        [*(carry_over(latest.sentences) if latest else []), back],
        base=latest.number if latest else None,
        strategy="user",
        status="ok",
        author="user",
        notes=[note("restored")],
        details={"restored": sentence.id},
    )


def revert(engine: MemoryEngine, user_id: int, to: int, base: int) -> Version:
    """A new version by the user equal to version `to` (its texts, order, sources and cue words), made on `base`,
    the version the person saw. Sentences the latest version still holds continue there, the rest come back."""
    if not 1 <= to < base:
        raise InputError(
            f"--to {to}: give an earlier version than the latest ({base}); see: keem memory history",
            code="revert_nothing",
            latest=base,
        )
    target = engine.store.versions.get(user_id, to)
    shown = engine.store.versions.get(user_id, base)
    unclaimed: dict[str, Sentence] = {}
    for s in reversed(shown.sentences):
        unclaimed[s.text] = s
    out: list[Sentence] = []
    for s in target.sentences:
        same = unclaimed.pop(s.text, None)
        if same is not None:
            out.append(carry_over([same])[0])
        else:
            back = {**(s.sources or {}), "step": "revert", "at": now_iso()}
            out.append(replace(s, provenance="user", origin_id=s.id, id=None, sources=back))
    return engine.commit(
        user_id,
        out,
        base=base,
        strategy="user",
        status="ok",
        author="user",
        notes=[note("reverted", to=to)],
        details={"revert_to": to},
        records=follow(target.records, out),  # the emotion records as they were then (a resolution undone with it)
    )


def update_base(version: Version) -> int | None:
    """The version just before an update (what "이번 갱신 되돌리기" brings back), or None when `version` is not an
    update or nothing came before it."""
    return version.number - 1 if version.author == "updater" and version.number > 1 else None
