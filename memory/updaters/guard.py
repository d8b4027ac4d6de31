"""The deletion guard: a previous memory sentence may vanish only when the new session justifies it.

How it decides, for each sentence of the previous memory:
1. Counterpart: the new memory keeps it if some new sentence is identical, or holds every noun of it and at
   least `CONTAINMENT` of its Korean content words (Kiwi lemmas): "병원에 방문할 예정" is not continued by
   "아는 언니네 방문할 예정", though two of its three words are there. Such new sentences are marked `kept` or
   `rewritten` with the old sentence as origin; one new sentence continues several old ones only when it
   contains each of them so (a merge).
2. Otherwise it was dropped. A drop is justified only if the session is about the same thing
   (the sentence shares a content word with the session's user turns, its summary, or a sentence the
   new memory added) AND the update model, asked with guard.txt, answers "예" (the session replaced
   or contradicted it). Everything else is restored verbatim, marked `restored`.
So a finished episode or an unrelated fact can never silently disappear, whatever the model writes.
Both tests are lexical on purpose, so the guard holds whatever the embedder: sentence-embedding cosines
between "사용자는 ..." sentences are high for unrelated facts too (multilingual-e5-small, the default, puts
unrelated pairs at 0.85-0.91: they share the template), so a cosine would call a dropped fact "rewritten".
The price is conservative: a fact replaced without any shared word ("서울에 산다" after "부산으로
이사했어") is restored; the updater's rewrite usually names both and is then a counterpart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from memory.korean import content_nouns, content_words
from memory.store import Sentence
from memory.updaters.base import carry_over

CONTAINMENT = 0.6


@dataclass
class GuardDecision:
    sentence: str
    action: str  # kept | rewritten | dropped | restored
    counterpart: str | None = None
    related: bool = False
    judge: str | None = None


def _containment(old: frozenset[str], new: frozenset[str]) -> float:
    return len(old & new) / len(old) if old else 0.0


def continuation(old: str, new_texts: list[str]) -> int | None:
    """The index of the new sentence that continues `old` (identical, or holding every noun of it and
    CONTAINMENT of its content words; the best such), or None."""
    words, nouns = content_words(old), content_nouns(old)
    scores = [
        1.0 if text == old else _containment(words, content_words(text)) if nouns <= content_words(text) else 0.0
        for text in new_texts
    ]
    best = max(range(len(scores)), key=scores.__getitem__, default=None)
    return best if best is not None and scores[best] >= CONTAINMENT else None


def keep_summary(sentences: list[Sentence], summary: list[str]) -> tuple[list[Sentence], list[str]]:
    """The new memory with every summary sentence it does not continue appended (a model that leaves this
    session's news out of its rewrite loses it otherwise); returns (sentences, the appended texts)."""
    texts = [s.text for s in sentences]
    missing = [line for line in dict.fromkeys(summary) if continuation(line, texts) is None]
    return sentences + [Sentence(line, "added") for line in missing], missing


def guard(
    previous: list[Sentence],
    new_texts: list[str],
    *,
    session_texts: list[str],
    judge: Callable[[str], tuple[bool | None, str]],
) -> tuple[list[Sentence], list[GuardDecision]]:
    """Attribute each new sentence to its origin and restore unjustified drops; returns (sentences, decisions).

    `judge(sentence)` asks the update model whether this session replaced or contradicted the sentence:
    (True, its answer) for yes; (False or None, ...) for no or no usable answer, and then the sentence stays.
    """
    new_words = [content_words(t) for t in new_texts]
    origin: dict[int, Sentence] = {}
    decisions: dict[int, GuardDecision] = {}
    for i, old in enumerate(previous):  # pass 1: counterparts
        best = continuation(old.text, new_texts)
        if best is not None:
            same = new_texts[best] == old.text
            origin.setdefault(best, carry_over([old])[0] if same else Sentence(new_texts[best], "rewritten", old.id))
            decisions[i] = GuardDecision(old.text, "kept" if same else "rewritten", new_texts[best])
    added_words = [new_words[j] for j in range(len(new_texts)) if j not in origin]
    topic = frozenset().union(*(content_words(t) for t in session_texts), *added_words)
    restored: list[Sentence] = []
    for i, old in enumerate(previous):  # pass 2: every drop must be justified
        if i in decisions:
            continue
        related = bool(content_words(old.text) & topic)
        verdict, answer = judge(old.text) if related else (None, None)
        if verdict is True:
            decisions[i] = GuardDecision(old.text, "dropped", related=True, judge=answer)
        else:
            restored += carry_over([old], "restored")
            decisions[i] = GuardDecision(old.text, "restored", related=related, judge=answer)
    sentences = [origin.get(j, Sentence(text, "added")) for j, text in enumerate(new_texts)]
    return sentences + restored, [decisions[i] for i in range(len(previous))]


def decisions_json(decisions: list[GuardDecision]) -> list[dict[str, object]]:
    return [asdict(d) for d in decisions]
