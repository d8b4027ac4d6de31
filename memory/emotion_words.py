"""Emotion-and-cause sentences: which words name a feeling and which part says what caused it (a heuristic on
Korean surface forms, shared by the memory tab's marks, a row's "왜?" and `keem memory why`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

EMOTION = re.compile(
    r"(기쁘|기뻐|기쁨|행복|즐거|신나|설레|뿌듯|만족|감사|고마|안도|편안|슬프|슬퍼|슬픔|우울|외로|"
    r"속상|서운|실망|후회|불안|걱정|두려|무서|긴장|초조|화가|화를|짜증|답답|억울|스트레스|힘들|"
    r"괴로|지쳐|지친|피곤|부끄|창피|그리워|아쉬|좋아해|싫어|홀가분|happy|sad|worried|anxious|angry)"
)
CAUSE = re.compile(r"(서 |서,|때문|덕분|탓에|로 인해|바람에|면서|니까|because)")
SUBJECT = re.compile(r"^\s*사용자(?:는|가|의)?\s*")


def is_emotion(text: str) -> bool:
    """An emotion-and-cause sentence: names a feeling and what caused it (a heuristic for marking)."""
    return bool(EMOTION.search(text)) and bool(CAUSE.search(text))


@dataclass(frozen=True)
class EmotionParts:
    emotion: list[str]  # the words that carry the feeling ("속상했다")
    cause: str  # the part of the sentence that says why ("시험에 떨어져서")


def emotion_parts(text: str) -> EmotionParts | None:
    """For an emotion-and-cause sentence, the feeling's words and the cause (the clause up to the last causal
    ending before the first feeling word); None for any other sentence."""
    if not is_emotion(text):
        return None
    words = text.split()
    feeling = [w.strip(".,!?") for w in words if EMOTION.search(w)]
    first = EMOTION.search(text)
    assert first is not None
    links = [m for m in CAUSE.finditer(text) if m.end() <= first.start() + 1]
    if links:  # "시험에 떨어져서 속상했다": the cause comes first
        subject = SUBJECT.match(text)
        cause = text[subject.end() if subject else 0 : _word_end(text, links[-1].end())]
        return EmotionParts(feeling, cause.strip(" ,."))
    # "불안하다, 시험 때문에": the cause follows the feeling word
    word_end = text.find(" ", first.end())
    rest = text[word_end:] if word_end >= 0 else ""
    last = list(CAUSE.finditer(rest))
    return EmotionParts(feeling, rest[: _word_end(rest, last[-1].end())].strip(" ,.") if last else "")


def _word_end(text: str, at: int) -> int:
    """`at` moved to the end of the word it is in ("때문" -> "때문에"); a match that ended on a space ends there."""
    if at > 0 and text[at - 1] in " ,":
        return at - 1
    while at < len(text) and not text[at].isspace() and text[at] not in ",.!?":
        at += 1
    return at
