"""Korean text helpers on Kiwi morphemes: content words for lexical matching and keywords."""

from __future__ import annotations

import functools
import re

CONTENT_TAGS = ("NNG", "NNP", "NR", "VV", "VA", "XR", "SL", "SH", "SN")
# Words every memory sentence shares ("사용자는 ... 했다"): they say nothing about the topic.
STOP = frozenset({"사용자", "하", "있", "되", "없", "것", "수", "때", "등", "년", "월", "일", "보", "좋", "같"})


@functools.lru_cache(maxsize=1)
def kiwi():
    from kiwipiepy import Kiwi

    return Kiwi()


@functools.lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """Lemmas of nouns, verb/adjective stems, roots and foreign words, minus the ubiquitous ones."""
    words = set()
    for token in kiwi().tokenize(text):
        if token.tag.startswith(CONTENT_TAGS):
            form = token.form.lower()
            if form not in STOP and not re.fullmatch(r"\W+", form):
                words.add(form)
    return frozenset(words)
