"""A memory row's '완전히 지우기' of one sentence: which turns, summary lines and sentences of earlier versions said
it, erased or redacted with it.

The rule: a turn (the user's, or the reply that echoed it) is a source of a sentence when its Kiwi content words
(memory/korean.py) hold at least half of the sentence's content nouns, rounded up, and at least one; or when it
contains the sentence verbatim. Digit runs count as nouns (Kiwi tags "010-2741-9386" as a serial), but not the
dates an update writes ("다음 달" said, "2027년 1월" stored: memory/dates.py), and a noun
inside a compound counts ("번호" covers "전화번호"). Memory sentences restate what the user said in other words
("사용자는 지난달 코로나에 걸렸다" from "나 지난달에 코로나 걸렸었어"), so full word overlap would miss most
sources, while the nouns are what a fact is about (places, names, numbers). The rule errs towards redacting: a turn
that only shares a topic with the sentence is redacted too, which costs the trial export one line of text (the
turn stays, for counts), whereas a missed source would keep the very text the user asked to erase.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from memory.korean import content_nouns, content_words, timeless
from memory.store import Erased, Store
from memory.store.notes import json_strings, strings
from models.errors import InputError


def numbers(text: str) -> frozenset[str]:
    """Runs of digits, separators dropped ("010-2741-9386" -> "01027419386"): Kiwi tags them as serials, not nouns."""
    return frozenset(re.sub(r"\D", "", m) for m in re.findall(r"\d[\d\s.\-]*\d|\d", text))


def _covered(noun: str, words: frozenset[str]) -> bool:
    """A noun the text has, as a word or inside a compound either way ("번호" and "전화번호")."""
    return noun in words or (len(noun) >= 2 and any(len(w) >= 2 and (w in noun or noun in w) for w in words))


def said(text: str, sentences: Iterable[str]) -> bool:
    """Whether `text` states one of `sentences` by the rule above."""
    words = content_words(text) | numbers(text)
    for sentence in sentences:
        if sentence.strip() and sentence.strip() in text:
            return True
        nouns = content_nouns(sentence) | numbers(timeless(sentence))  # a date written as stored: when, not what
        if nouns and sum(_covered(n, words) for n in nouns) >= max(1, math.ceil(len(nouns) / 2)):
            return True
    return False


def fragments(text: str, sentences: Iterable[str]) -> list[str]:
    """The lines and sentences of a longer text (a session summary in a version's details) that state one of
    `sentences`: these are scrubbed too."""
    sentences = list(sentences)
    parts = (p.strip() for p in re.split(r"\n|(?<=[.!?다요])\s+", text))
    return [p for p in parts if p and said(p, sentences)]


def forget_sentence(store: Store, user_id: int, text: str) -> Erased:
    """Remove a sentence of the user's current memory, its earlier and later forms, and sentences of earlier
    versions that state it, from every version (memory/store/erasure.py); redact the turns that said it and the
    summary lines that repeat it, by the rule above. A caller holding a search index rebuilds it
    (MemoryEngine.forget_sentence)."""
    text = text.strip()
    latest = store.versions.latest(user_id)
    if latest is None or text not in latest.texts:
        raise InputError(
            "that sentence is not in the user's current memory; copy it from: keem memory show "
            "(or give its number there)",
            code="erase_unknown_sentence",
        )
    rows = store.erasure.lineage(user_id, [text])
    gone = {r["id"] for r in rows}
    if all(s.id in gone for s in latest.sentences):
        raise InputError(
            "this sentence is all the current memory holds, and a memory is never empty; "
            "forget the whole user instead: keem memory forget --user NAME",
            code="erase_last_sentence",
        )
    forms = sorted({r["text"] for r in rows})
    # earlier versions may state the fact in words of their own (an accumulated "사용자는 '...'라고 말했다"):
    # those go too; the current memory keeps every sentence but the one chosen
    current = {s.id for s in latest.sentences}
    everything = store.rows("select id, version_id, origin_id, text from memory_sentences where user_id = ?", [user_id])
    rows += [r for r in everything if r["id"] not in gone | current and said(r["text"], forms)]
    turns = store.rows("select id, text from turns where user_id = ?", [user_id])
    sources = [t["id"] for t in turns if said(t["text"], forms)]
    found: list[str] = []
    for version in store.versions.of_user(user_id):
        for value in (*strings(version.notes), *json_strings(version.details)):
            found += fragments(value, forms)
    return store.erasure.forget_sentences(user_id, rows, sources, found)
