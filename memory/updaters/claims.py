"""What the rewrite says it replaced: "이전 문장 => 새 문장" lines after its new memory (memory/prompts/update.txt).

The rewrite knows why it left a previous sentence out; the guard asks it to say so, one claim per sentence it
replaced or found over, and puts only those claims to the pairwise judge. A claim is read as leniently as a
model writes it and trusted no further than it can be matched:

- the claims follow a "바뀐 문장:" line; a claim line anywhere ("A => B", "A -> B", "A → B") is a claim, never
  memory, whatever wraps it (a <think> block, fences, bullets, numbering, quotes), and any other line is read as
  memory wherever it stands (a model that lists its claims first loses no sentence of its memory);
- its A must be a previous sentence (exactly, or holding every noun of one and 60% of its content words), its B a
  sentence of the new memory or this session's (the same way), or "끝남" (over: the judge then reads the dialogue);
- a claim that matches nothing, a line cut at the token budget, or a missing claims section is simply no claim,
  so the sentence it would have justified is restored: no claim ever loses a fact on its own;
- an answer that keeps the protocol (`lists_claims`) is taken at its word: a drop it claims nothing about is a
  silent drop, restored without asking the judge unless the scope call named it too (memory/updaters/guard.py);
  only an answer with no claims section at all gets the attribute table's pairs (relatedness.py) as a backup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.text import strip_wrappers
from memory.updaters.guard import continuation

MARKER = re.compile(r"^\W*바뀐\s*문장\s*[:：]?\s*(.*)$")
ARROW = re.compile(r"\s*(?:=>|->|→|⇒)\s*")
_LEAD = re.compile(r"^\s*(?:[-*•·]|\d+[.)]|[(（]\d+[)）])\s*")
OVER = ("끝남", "끝났", "끝", "없음", "over")
# B of a claim that names no replacement: the judge reads the dialogue
OVER_TEXT = "(이번 대화에 따르면 이 일은 끝났다)"


@dataclass(frozen=True)
class Claim:
    old: str  # the previous sentence, as the model wrote it
    new: str | None  # the sentence that replaced it, or None: it is over


def _clean(text: str) -> str:
    return _LEAD.sub("", text).strip().strip("\"'“”‘’*` ").strip()


def split_claims(answer: str) -> tuple[str, list[Claim]]:
    """(the answer without its claims, the claims): every arrow line, anywhere, is a claim (the "바뀐 문장:" marker
    removed); a claim line with an empty side (cut at the budget, or "A =>") is dropped; the rest is memory, after
    the marker only lines that end as a sentence does (a claim cut before its arrow is no memory)."""
    memory: list[str] = []
    claims: list[Claim] = []
    after = False
    for raw in strip_wrappers(answer).splitlines():
        marker = MARKER.match(_LEAD.sub("", raw))
        line = marker.group(1) if marker else raw
        after = after or bool(marker)
        parts = ARROW.split(line, maxsplit=1)
        if len(parts) == 2:
            old, new = _clean(parts[0]), _clean(parts[1])
            if old and new:
                over = new.rstrip(".").strip() in OVER
                claims.append(Claim(old, None if over else new))
            continue
        if not after or line.rstrip(" \"'”").endswith((".", "다", "요")):  # past the claims, only whole sentences
            memory.append(line)
    return "\n".join(memory), claims


def lists_claims(answer: str) -> bool:
    """Whether the answer keeps the claims protocol: a "바뀐 문장:" line or a claim line. A model that does leaves
    nothing to guess: a drop it claims nothing about is a silent drop (restored, unless the scope call named it:
    memory/updaters/guard.py); one that does not (an older
    prompt, a model that ignores the instruction) gets the attribute table's pairs (relatedness.py) instead."""
    lines = [_LEAD.sub("", line) for line in strip_wrappers(answer).splitlines()]
    return any(MARKER.match(line) or len(ARROW.split(line, maxsplit=1)) == 2 for line in lines)


def resolve(claims: list[Claim], previous: list[str], candidates: list[str]) -> list[tuple[int, str]]:
    """(index into `previous`, the replacing sentence) for each claim that names a previous sentence and a sentence
    among `candidates` (the new memory, this session's summary and user turns), or is over (OVER_TEXT); the first
    claim about a sentence wins. Matching is `continuation`'s (identical, or every noun and 60% of the words)."""
    out: dict[int, str] = {}
    for claim in claims:
        i = previous.index(claim.old) if claim.old in previous else _within(claim.old, previous)
        if i is None or i in out:
            continue
        if claim.new is None:
            out[i] = OVER_TEXT
            continue
        j = candidates.index(claim.new) if claim.new in candidates else _within(claim.new, candidates)
        if j is not None and candidates[j] != previous[i]:
            out[i] = candidates[j]
    return sorted(out.items())


def _within(said: str, texts: list[str]) -> int | None:
    """The text `said` stands for: one holding it (every noun, 60% of the words), else one it holds."""
    found = continuation(said, texts)
    if found is not None:
        return found
    return next((k for k, text in enumerate(texts) if continuation(text, [said]) is not None), None)
