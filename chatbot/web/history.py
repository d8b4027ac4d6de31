"""How the memory tab names a memory version in its history: who or what made it, and for a safe-mode version
the real reason (from the version's details, never from its notes), in plain Korean (chatbot/web/messages.py
LABELS). The strategy is named only outside a blind trial."""

from __future__ import annotations

import string
from collections.abc import Sequence

from chatbot.web.messages import LABELS, NOTES
from memory.store import Note, Version
from memory.store.erasure import MARKER
from memory.store.notes import ERASED, english_one, joined, strings
from memory.words import PARTICLES, particle


def fallback_reason(version: Version) -> str:
    """Why an update fell back to accumulation: the reason its updater recorded (details["fallback"]); a version
    written before reasons were recorded: no verification attempt means no usable summary."""
    reason = version.details.get("fallback")
    if reason in ("not_asked", "no_summary", "not_verified"):
        return str(reason)
    return "not_verified" if version.details.get("attempts") else "no_summary"


def version_label(version: Version, show_strategy: bool = True) -> str:
    """What made the version, in a few words ("대화를 마친 뒤 기억을 새로 썼습니다", "직접 고쳤습니다", ...)."""
    if version.author == "updater":
        label = LABELS["updater_fallback" if version.status == "fallback" else "updater"]
    else:
        label = LABELS.get(version.author, LABELS["user"])
    if show_strategy and version.author == "updater":
        label += " · " + LABELS["strategy"].format(name=version.strategy)
    return label


class _Particles(string.Formatter):
    """str.format where a field's spec may name a particle: "{to:으로}" is particle(to, "으로")."""

    def format_field(self, value: object, format_spec: str) -> str:
        return particle(value, format_spec) if format_spec in PARTICLES else super().format_field(value, format_spec)


def note_text(notes: Sequence[Note]) -> str:
    """A version's notes in Korean, one line (NOTES); a code without Korean words (an updater's) in English."""
    return joined(
        (n, _Particles().format(NOTES[n.code], **n.params) if n.code in NOTES else english_one(n)) for n in notes
    )


def version_reasons(version: Version) -> list[str]:
    """The sentences that say why the version is as it is: a safe mode's reason, a rebase, an erasure. A user's own
    edits show their notes in Korean (NOTES); an updater's or an import's notes are technical and stay out of the
    page (they are in `keem memory history` and the trial export), LABELS says what they mean."""
    reasons = []
    if version.author == "updater" and version.status == "fallback":
        reasons.append(LABELS[fallback_reason(version)])
    if version.author != "updater" and version.author != "import" and version.notes:
        return [note_text(version.notes)]
    if "rebase" in version.details:
        reasons.append(LABELS["rebased"])
    if any(n.code == ERASED for n in version.notes) or any(MARKER in s for s in strings(version.notes)):
        reasons.append(LABELS["erased"])
    return reasons
