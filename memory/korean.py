"""Korean text helpers on Kiwi morphemes: content words for lexical matching and keywords."""

from __future__ import annotations

import functools
import re
import threading

CONTENT_TAGS = ("NNG", "NNP", "NR", "VV", "VA", "XR", "SL", "SH", "SN")
NOUN_TAGS = ("NNG", "NNP", "NR", "SL", "SH", "SN")
# Words every memory sentence shares ("사용자는 ... 했다"): they say nothing about the topic.
STOP = frozenset({"사용자", "하", "있", "되", "없", "것", "수", "때", "등", "년", "월", "일", "보", "좋", "같"})


_KIWI_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _kiwi():
    from kiwipiepy import Kiwi

    # Without the typo dictionary and WikiData's multi-word names: every process that reads Korean (each app
    # process, worker and memory command) starts 1.7-2 s of CPU sooner (3.0 -> 1.1-1.5 s to a first analysis), and
    # kiwipiepy 0.24 analyses the same: identical tokens on 3,088 Korean strings of this repository, and the same
    # content words on chat-style endings and typos ("갔었음", "먹었당", "몰랏어") and multi-word names ("해리 포터").
    return Kiwi(load_typo_dict=False, load_multi_dict=False)


def kiwi():
    """The one Kiwi analyzer; built once even when several pooled updates ask at the same moment."""
    with _KIWI_LOCK:
        return _kiwi()


def morphemes(text: str, tags: tuple[str, ...] = CONTENT_TAGS) -> list[str]:
    """Content lemmas (nouns, verb/adjective stems, roots, foreign words) in order, repeats kept, minus STOP."""
    out = []
    for token in kiwi().tokenize(text):
        if token.tag.startswith(tags):
            form = token.form.lower()
            if form not in STOP and not re.fullmatch(r"\W+", form):
                out.append(form)
    return out


@functools.lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """The set of `morphemes(text)`: what lexical matching compares."""
    return frozenset(morphemes(text))


# Relative times: an update resolves them into dates ("지난주에 이사했다" -> "2024년 5월에 이사했다").
RELATIVE_TIME = frozenset(
    {
        "어제",
        "오늘",
        "내일",
        "모레",
        "그제",
        "지난주",
        "이번",
        "다음",
        "지난",
        "주",
        "주말",
        "지난달",
        "이번달",
        "다음달",
        "올해",
        "작년",
        "내년",
        "요즘",
        "최근",
        "아까",
        "방금",
        "나중",
        "얼마",
        "전",
        "후",
        "뒤",
    }
)


# Absolute times as an update writes them (memory/dates.py: "2026년 12월 8일", "2024년 2월 셋째 주", "12월 5일~6일"):
# when a fact happened, not what it is about.
WRITTEN_TIME = re.compile(r"\d{4}년|\d{1,2}월|\d{1,2}일|(?:첫째|둘째|셋째|넷째|다섯째)\s*주|~")


def timeless(text: str) -> str:
    """`text` without the absolute times an update writes: what a rewrite that drops or changes a date continues."""
    return WRITTEN_TIME.sub(" ", text)


@functools.lru_cache(maxsize=4096)
def content_nouns(text: str) -> frozenset[str]:
    """The nouns, numbers and foreign words of `content_words(text)`, relative and written times aside: what a fact
    is about."""
    return frozenset(morphemes(timeless(text), NOUN_TAGS)) - RELATIVE_TIME
