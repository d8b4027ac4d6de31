"""How the memory tab names a memory version in its history: who or what made it, and for a safe-mode version
the real reason (from the version's details, never from its English note), in plain Korean (chatbot/web/messages.py
LABELS). The strategy is named only outside a blind trial."""

from __future__ import annotations

from chatbot.web.messages import LABELS
from memory.store import Version
from memory.store.erasure import MARKER


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


def version_reasons(version: Version) -> list[str]:
    """The sentences that say why the version is as it is: a safe mode's reason, a rebase, an erasure. A user's own
    edits keep their note (written in Korean by the memory tab); an updater's or an import's note is technical
    English and stays out of the page (it is in `keem memory history` and the trial export)."""
    reasons = []
    if version.author == "updater" and version.status == "fallback":
        reasons.append(LABELS[fallback_reason(version)])
    if version.author != "updater" and version.author != "import" and version.note:
        return [version.note]
    if "rebase" in version.details:
        reasons.append(LABELS["rebased"])
    if version.note and MARKER in version.note:
        reasons.append(LABELS["erased"])
    return reasons
