"""The memory tab's emotion timeline: each emotion with its cause, since when, its status and how it ended, with the
user's words behind it; newest first. The records are the latest version's (memory/store/emotions.py)."""

from __future__ import annotations

from chatbot.web.messages import NO_EMOTIONS_RECORDED
from chatbot.web.render import md
from memory.emotions import STATUS_KOREAN, newest_first
from memory.store.emotions import EmotionRecord

EMPTY = "_아직 기록된 감정이 없습니다. 대화에서 느낀 감정과 그 이유를 말하면 여기에 남습니다._"


def render_timeline(records: list[EmotionRecord], recorded: bool = True) -> str:
    """Markdown: one block per record; `recorded` False when the update model is never asked (the demo), so that
    no record does not read as "nothing felt yet"."""
    if not records:
        return EMPTY if recorded else NO_EMOTIONS_RECORDED
    blocks = []
    for r in newest_first(records):
        when = f"{r.first_seen}부터 · {STATUS_KOREAN.get(r.status, r.status)}" + (f" · 날짜 {r.due}" if r.due else "")
        lines = [f"- **{md(r.emotion)}** · {md(r.cause)}", when]
        if r.quote:
            lines.append(f"말: “{md(r.quote)}”")
        if r.ended:
            lines.append(f"끝 ({r.ended_at}): “{md(r.ended)}”")
        blocks.append("  \n  ".join(lines))
    return "\n".join(blocks)
