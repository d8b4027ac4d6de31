"""What changed between two memory versions, by each sentence's origin: one diff for the CLI, the page and exports.

A sentence of the new version that names a sentence of the previous one as its origin (memory/updaters/base.py
carry_over, the guard's counterparts, a user's edit) continues it: `kept` when the text is the same, `rewritten`
(old, new) when not. A sentence with no origin there is `kept` when the previous version held the same text (a
version written before origins were recorded), otherwise `added`. A previous sentence nothing continues is
`removed`. So a rewrite shows as one rewrite, never as a removal plus an addition. The matching is
memory/store/rebase.py's `continuations`, the same one a commit on a stale base uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory.store import Version
from memory.store.rebase import continuations


@dataclass(frozen=True)
class VersionDiff:
    kept: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rewritten: list[tuple[str, str]] = field(default_factory=list)  # (old text, new text)

    def as_json(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "added": self.added,
            "removed": self.removed,
            "rewritten": [{"old": old, "new": new} for old, new in self.rewritten],
        }


def version_diff(previous: Version | None, current: Version) -> VersionDiff:
    """kept / added / removed / rewritten from `previous` (None: the first version) to `current`."""
    old = {s.id: s.text for s in previous.sentences} if previous else {}
    diff = VersionDiff()
    origins = continuations(previous.sentences if previous else (), current.sentences)
    for s, origin in zip(current.sentences, origins):
        if origin is None:
            diff.added.append(s.text)
        elif old[origin] == s.text:
            diff.kept.append(s.text)
        else:
            diff.rewritten.append((old[origin], s.text))
    continued = {o for o in origins if o is not None}
    diff.removed.extend(text for sid, text in old.items() if sid not in continued)
    return diff
