"""Korean personal data in exported text, replaced by tags: `Scrubber()(text)` returns the text with phone
numbers, e-mail addresses, resident registration numbers, card numbers, bank account numbers and street
addresses replaced by [전화번호], [이메일], [주민등록번호], [카드번호], [계좌번호], [주소], counting each kind.

Patterns, not a model: they catch the usual written forms (010-2345-6789, 01023456789, 02-123-4567,
+82 10-2345-6789, minji.kim@example.com, 900101-2345678, 1234-5678-9012-3456, 110-123-456789 or a run of
digits after 계좌/은행/a bank's name, 서울시 마포구 월드컵로 212, 경기도 성남시 분당구 판교역로 235 101동 202호,
마포구 상암동 1600). A district or town alone ("마포구에 산다") is kept: only an address down to the building
number is one. Names of people are not touched (pseudonymize participants with --pseudonymize).
"""

from __future__ import annotations

import re
from collections import Counter

TAGS = {
    "email": "[이메일]",
    "resident_number": "[주민등록번호]",
    "card": "[카드번호]",
    "phone": "[전화번호]",
    "account": "[계좌번호]",
    "address": "[주소]",
}

_SEP = r"[-. ]?"
_PROVINCE = (
    r"(?<![가-힣])(?:서울|부산|대구|인천|광주|대전|울산|세종|경기|강원|충북|충남|전북|전남|경북|경남|제주|"
    r"충청북|충청남|전라북|전라남|경상북|경상남)(?:특별자치시|특별자치도|특별시|광역시|도|시)?"
)
# words ending in 시/구/군 that are no district ("친구 집으로 3")
_COMMON = (
    r"(?:다시|혹시|역시|당시|동시|도시|항시|친구|연구|요구|입구|출구|야구|축구|농구|배구|지구|가구|도구|식구|창구|장군)"
)
_DISTRICT = rf"(?<![가-힣])(?!{_COMMON}(?![가-힣]))[가-힣]{{1,6}}(?:시|군|구)"
_ROAD = r"[가-힣A-Za-z0-9·]{1,14}(?<!으)(?:로|길)(?:\s*\d{1,4}번?길)?"  # 월드컵로, 월드컵북로4길, 테헤란로 212번길
_TOWN = r"[가-힣]{1,6}\d{0,2}(?:동|읍|면|리)|[가-힣]{1,6}\d{1,2}가"  # 상암동, 을지로3가
_COUNTER = r"(?:시|분|초|명|번|개|살|세|월|일|년|원|등|위|장|권|마리|잔|병|회|차|째|km|킬로|미터|퍼센트|%)"
_NUMBER = rf"(?:지하\s*)?\d{{1,5}}(?:-\d{{1,5}})?(?:번지|(?![\d-]|\s*{_COUNTER}))"  # 212, 1600-3번지, not "3시"
_UNIT = r"(?:\s*,?\s*(?:[A-Za-z가-힣0-9]{0,12}\s*)?\d{1,4}동\s*\d{1,5}호|\s*,?\s*\d{1,5}호|\s*,?\s*\d{1,3}층)?"
_PLACE = rf"(?:(?:{_TOWN})\s*{_NUMBER}|{_ROAD}\s*{_NUMBER})"
_BANK = r"(?:계좌|통장|은행|뱅크|입금|송금|국민|신한|우리|하나|농협|기업|카카오|토스|새마을|우체국|수협|신협|SC|씨티)"

# in this order: an e-mail's or a card's digits are never taken for a phone or an account
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "email",
        re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
            r"\.[A-Za-z]{2,}(?![A-Za-z0-9])"
        ),
    ),
    (
        "resident_number",
        re.compile(
            r"(?<![\d-])\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\s?-?\s?[1-8]"
            r"(?:\d{6}|\*{6})(?![\d*])"
        ),
    ),
    ("card", re.compile(r"(?<![\d-])(?:\d{4}([- ])\d{4}\1\d{4}\1\d{4}|\d{16}|\d{4}([- ])\d{6}\2\d{5})(?![\d-])")),
    (
        "phone",
        re.compile(
            r"(?<![\d+])(?:\+82[- ]?\(?0?\)?(?:1[016789]|2|[3-6][1-5]|70)\)?"
            + _SEP
            + r"|\(?0(?:1[016789]|2|[3-6][1-5]|70|50\d)\)?"
            + _SEP
            + r")\d{3,4}"
            + _SEP
            + r"\d{4}(?![\d-])"
        ),
    ),
    # digit groups joined by hyphens, 10-14 digits in all (110-123-456789, 3333-01-1234567)
    ("account", re.compile(r"(?<![\d-])(?=(?:\d-?){10,14}(?![\d-]))\d{2,6}(?:-\d{2,7}){2,3}(?![\d-])")),
    (
        "address",
        re.compile(
            rf"(?:{_PROVINCE}\s*(?:{_DISTRICT}\s*){{0,2}}|(?:{_DISTRICT}\s*){{1,2}})"
            rf"{_PLACE}{_UNIT}(?!\d)"
        ),
    ),
)
# a run of 10-14 digits shortly after a word that says it is an account ("국민은행 123456789012")
_ACCOUNT_AFTER_BANK = re.compile(rf"({_BANK}[^\d\n]{{0,12}}?)(?<![\d-])(\d(?:-?\d){{9,13}})(?![\d-])")


class Scrubber:
    """Replaces personal data by tags and counts what it replaced, per kind, over every text it was given."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for kind, pattern in PATTERNS:
            text, n = pattern.subn(TAGS[kind], text)
            self.counts[kind] += n
            if kind == "account":
                text, n = _ACCOUNT_AFTER_BANK.subn(lambda m: m.group(1) + TAGS["account"], text)
                self.counts[kind] += n
        return text

    def report(self) -> dict[str, int]:
        """Counts per kind, every kind listed (0 where none was found)."""
        return {kind: self.counts.get(kind, 0) for kind in TAGS}


def scrub(text: str) -> str:
    """One text with its personal data replaced by tags."""
    return Scrubber()(text)
