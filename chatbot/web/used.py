""" "이번 답변에 쓰인 기억" in plain words: the whole memory when the prompt held all of it, else the few sentences
most related to the message, each with a 관련도 label instead of a raw score."""

from __future__ import annotations

from chatbot.bot import Chatbot
from chatbot.session import ChatSession
from chatbot.web.render import md
from memory.engine import Hit
from memory.store import Version

SHOWN = 3  # the most related sentences listed when the prompt held only part of the memory
LINK = "전체 기억은 **기억** 탭에서 볼 수 있어요."


def relevance(hits: list[Hit]) -> list[str]:
    """A label per hit, by its score against the other hits of the same search (scores of different embedders and
    of the lexical match have no common scale, so no absolute threshold): the top third of the spread 높음, the
    middle 보통, the rest 낮음; all 보통 when they score alike."""
    if not hits:
        return []
    top, low = max(h.score for h in hits), min(h.score for h in hits)
    if top - low < 1e-6:
        return ["보통"] * len(hits)
    labels = []
    for h in hits:
        share = (h.score - low) / (top - low)
        labels.append("높음" if share >= 2 / 3 else "보통" if share >= 1 / 3 else "낮음")
    return labels


def whole_memory(session: ChatSession, version: Version | None) -> int | None:
    """How many sentences the memory (`version`, the user's current one) has, when the reply's prompt held all of
    them (else None)."""
    if session.pinned is None or session.pinned[0] is None:
        return None
    if version is None or version.id != session.pinned[0]:
        return None
    return len(version.sentences) if len(session.pinned[1]) >= len(version.sentences) else None


def render_used(bot: Chatbot, session: ChatSession) -> str:
    """What the last reply's prompt held of the user's memory, for the "이번 답변에 쓰인 기억" panel: the whole memory
    or part of it, then the sentences most related to the message, each with its 관련도."""
    hits = session.last_hits[:SHOWN]
    version = bot.engine.current(session.user_id)  # read once a reply
    whole = whole_memory(session, version)
    if whole:
        head = f"기억 전체를 참고했어요 ({whole}문장)."
    elif not hits:
        return "이번 답변에는 참고한 기억이 없어요."
    else:
        head = f"기억 {len(version.sentences)}문장 중 일부를 참고했어요." if version else "기억 일부를 참고했어요."
    if not hits:
        return f"{head} {LINK}"
    lines = [f"{head} 이 메시지와 가장 관련된 기억은 이것이에요. {LINK}", ""]
    lines += [f"- {md(h.text)} · 관련도 {label}" for h, label in zip(hits, relevance(hits), strict=True)]
    return "\n".join(lines)
