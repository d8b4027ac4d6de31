"""Which new sentence may have replaced a dropped memory sentence, for a drop the rewrite claims nothing about.

"사용자는 서울 마포구에 산다" and "부산으로 이사했어" share no content word, yet the second ends the first. The guard
asks the update model one pairwise question per candidate pair ("B가 사실이면 A는 더 이상 사실이 아닌가요?"), all
pairs in one call. Its first candidates come from meaning: what the rewrite itself says it replaced
(memory/updaters/claims.py: "시력이 나빠 안경을 쓴다 => 라식 수술을 받았다", for any attribute). This module is the
backup for a drop with no claim (a model that writes none, or leaves one out): a pair (dropped A, new or summary
sentence B) is a candidate when there is evidence that B speaks to the same attribute of the user:
1. **same attribute**: both carry a cue of one attribute in ATTRIBUTES (where the user lives, their work, a
   relationship, a habit, their health, a plan, a pet, their schooling, military service, a pregnancy or a
   newborn), and both are about the same people: a grandmother's home is not the user's (KIN words must agree,
   except for relationships and newborns, which are about other people);
2. **a shared noun** (Kiwi lemmas; numbers, relative times, times of day and light nouns such as 활동 aside): a
   shared verb stem ("가", "먹") says little about what a sentence is about, and every pair put to the judge is a
   fact a judge that agrees too easily may remove.
The embedder only orders the candidates of one dropped sentence (its nearest B first); it never makes a pair on
its own. Sentence cosines between "사용자는 ..." facts are high for unrelated facts too (multilingual-e5-small
puts them at 0.85-0.91) and differ by embedder, so a cosine is not evidence the guard may act on: the judge is
asked only where the table or a shared word says the two sentences are about the same thing. An unrelated fact
a model drops silently is therefore never put to the judge, and is restored whatever the judge would have said.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memory.korean import content_nouns, content_words

# Attribute cues. A cue matches a sentence when it is one of its Kiwi lemmas, or (two syllables or more) appears
# in its text: compound nouns ("남자친구", "전자담배") are split by Kiwi, one-syllable stems ("살", "낫") are not
# safe as substrings. Only attributes that change in a life belong here, not tastes or traits.
ATTRIBUTES: dict[str, frozenset[str]] = {
    "residence": frozenset(
        {"살", "사시", "사신", "이사", "거주", "자취", "이주", "입주", "전세", "월세", "하숙", "기숙사"}
    ),
    "work": frozenset(
        {
            "회사",
            "회사원",
            "직장",
            "직장인",
            "입사",
            "퇴사",
            "이직",
            "취직",
            "취업",
            "출근",
            "프리랜서",
            "근무",
            "직업",
            "창업",
            "사업",
            "알바",
            "아르바이트",
            "백수",
            "실직",
            "은퇴",
            "그만두",
            "일하",
            "일한",
            "일해",
            "다니",
            "공무원",
            "회계사",
            "디자이너",
            "개발자",
            "마케터",
            "연구원",
            "교사",
            "간호사",
        }
    ),
    "relationship": frozenset(
        {
            "남자친구",
            "여자친구",
            "남친",
            "여친",
            "애인",
            "연인",
            "사귀",
            "사귄",
            "헤어지",
            "헤어졌",
            "헤어져",
            "이별",
            "결혼",
            "이혼",
            "약혼",
            "연애",
            "소개팅",
            "남편",
            "아내",
            "배우자",
            "짝사랑",
        }
    ),
    "habit": frozenset({"담배", "흡연", "금연", "피우", "전자담배", "술", "음주", "금주", "끊", "다이어트"}),
    "health": frozenset(
        {
            "아프",
            "아파",
            "병",
            "병원",
            "질병",
            "걸리",
            "걸렸",
            "낫",
            "나았",
            "회복",
            "완치",
            "입원",
            "퇴원",
            "수술",
            "치료",
            "통증",
            "고생",
            "감기",
            "독감",
            "몸살",
            "코로나",
            "장염",
            "디스크",
            "골절",
            "다치",
            "다쳤",
            "부상",
            "몸",
            "건강",
        }
    ),
    "plan": frozenset(
        {"예정", "계획", "준비", "시험", "합격", "불합격", "떨어지", "떨어졌", "지원", "유학", "면접", "결과"}
    ),
    "pet": frozenset({"반려", "반려견", "반려묘", "입양", "분양", "무지개다리", "고양이", "강아지"}),
    "study": frozenset(
        {
            "학교",
            "학생",
            "대학",
            "대학교",
            "대학생",
            "대학원",
            "고등학생",
            "중학생",
            "고3",
            "수험생",
            "수능",
            "재수",
            "학년",
            "학기",
            "입학",
            "졸업",
            "전공",
            "휴학",
            "복학",
            "자퇴",
            "편입",
            "새내기",
        }
    ),
    "service": frozenset({"군대", "군인", "입대", "복무", "전역", "제대", "훈련소", "군복무"}),
    "family": frozenset({"임신", "출산", "출산휴가", "육아", "육아휴직", "낳", "태어나", "만삭"}),
}
# People a sentence may be about other than the user: a fact about them is not a fact about the user's attribute.
KIN = frozenset(
    {
        "할머니",
        "할아버지",
        "어머니",
        "아버지",
        "엄마",
        "아빠",
        "부모",
        "동생",
        "언니",
        "오빠",
        "누나",
        "형",
        "친구",
        "남편",
        "아내",
        "딸",
        "아들",
        "동료",
        "이모",
        "삼촌",
        "사촌",
        "할매",
    }
)
# Kiwi sometimes reads "사용자는 왼손잡이다" as 사용 + 자: the subject of every memory sentence is no shared topic.
SUBJECT = frozenset({"사용", "사용자"})
# Nouns that say when, how often or how much (numbers too: "3월 5일" and "5월 1일" share 5), and light nouns
# ("봉사활동을 하다", "프리랜서로 활동하다"): shared, they say nothing of what two facts are about ("아침마다 라떼를
# 마신다" and "매일 아침 줄넘기를 한다").
SETTING = frozenset(
    {"아침", "저녁", "밤", "새벽", "오전", "오후", "낮", "평일", "매일", "매주", "매달", "하루", "번", "달"}
    | {"시간", "동안", "정도", "중", "활동", "생각", "마음", "기분"}
)
PERSONAL = frozenset({"relationship", "family"})  # attributes that are about other people by nature (a newborn)
MAX_PAIRS = 8  # pairs one judge call asks about; past that, the drops with the least evidence are restored


@functools.lru_cache(maxsize=4096)
def attributes(text: str) -> frozenset[str]:
    """The attributes of the user's life `text` speaks to (ATTRIBUTES' names)."""
    lemmas = content_words(text)
    return frozenset(
        name
        for name, cues in ATTRIBUTES.items()
        if any(cue in lemmas or (len(cue) >= 2 and cue in text) for cue in cues)
    )


@functools.lru_cache(maxsize=4096)
def people(text: str) -> frozenset[str]:
    """The people other than the user that `text` names (KIN lemmas)."""
    return content_words(text) & KIN


@dataclass(frozen=True)
class Evidence:
    """Why a dropped sentence and a new one may be about the same thing."""

    attributes: frozenset[str]
    words: frozenset[str]

    @property
    def strength(self) -> int:
        return 2 * len(self.attributes) + len(self.words)

    def __str__(self) -> str:
        parts = [f"same {a}" for a in sorted(self.attributes)] + [f"shares {w}" for w in sorted(self.words)]
        return ", ".join(parts)


def evidence(old: str, new: str) -> Evidence | None:
    """What says `new` may speak to the same fact as `old` (the attribute table, shared lemmas), or None."""
    shared = attributes(old) & attributes(new)
    if shared - PERSONAL and people(old) != people(new):
        shared &= PERSONAL  # someone else's home, job or health
    words = {w for w in (content_nouns(old) & content_nouns(new)) - SUBJECT - SETTING if not w.isdigit()}
    found = Evidence(frozenset(shared), frozenset(words))
    return found if found.strength else None


Cosine = Callable[[Sequence[str], Sequence[str]], np.ndarray]  # (a texts, b texts) -> a x b cosines


@dataclass(frozen=True)
class Pair:
    old: int  # index into the dropped sentences
    new: str  # the sentence that may replace it
    evidence: Evidence


def pair_drops(dropped: Sequence[str], candidates: Sequence[str], cosine: Cosine | None = None) -> list[Pair]:
    """For each dropped sentence with evidence, its likeliest replacement among `candidates` (most evidence, then
    the embedder's nearest, then the earliest); the MAX_PAIRS pairs with the most evidence, in dropped order."""
    if not dropped or not candidates:
        return []
    found = [[(e, j) for j, new in enumerate(candidates) if (e := evidence(old, new)) is not None] for old in dropped]
    tied = any(len([f for f in fs if f[0].strength == max(g[0].strength for g in fs)]) > 1 for fs in found if fs)
    cos = (  # the embedder is asked only to break a tie
        cosine(dropped, candidates) if cosine is not None and tied else np.zeros((len(dropped), len(candidates)))
    )
    pairs: list[Pair] = []
    for i, fs in enumerate(found):
        if fs:
            e, j = max(fs, key=lambda f: (f[0].strength, cos[i, f[1]], -f[1]))
            pairs.append(Pair(i, candidates[j], e))
    pairs = sorted(pairs, key=lambda p: -p.evidence.strength)[:MAX_PAIRS]
    return sorted(pairs, key=lambda p: p.old)


def named(reason: str, texts: Sequence[str]) -> list[int]:
    """The indices of `texts` a verifier's reason names: every noun of the sentence is in the reason (quoted or
    paraphrased), or 60% of its content words."""
    said = content_words(reason)
    out = []
    for i, text in enumerate(texts):
        words, nouns = content_words(text), content_nouns(text)
        if words and ((nouns and nouns <= said) or len(words & said) / len(words) >= 0.6):
            out.append(i)
    return out
