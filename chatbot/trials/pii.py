"""Korean personal data in exported text, replaced by tags: `Scrubber()(text)` returns the text with phone
numbers, e-mail addresses, resident registration numbers, card numbers, bank account numbers and home addresses
replaced by [전화번호], [이메일], [주민등록번호], [카드번호], [계좌번호], [주소], counting each kind.

Patterns, not a model: PATTERNS below lists every form caught, one kind per entry with an example. What is kept on
purpose (the near-misses tests/test_pii.py holds): dates, prices, times, versions and counts; order, tracking and
booking numbers (주문번호 20261103-000123: they name a purchase, not a person); a dated report or document
number (2026-11-03-01); a count or a price beside 주민 (주민 900101명); a district or town alone
("마포구에 산다": only an address down to the building, the lot or the flat is one); a building number or a room
alone ("3동 중 2동", "101호실 강의실", "2호선": only 동 and 호 together are a home). Names of people are not
touched (pseudonymize participants with --pseudonymize).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import partial

TAGS = {
    "email": "[이메일]",
    "resident_number": "[주민등록번호]",
    "card": "[카드번호]",
    "phone": "[전화번호]",
    "account": "[계좌번호]",
    "address": "[주소]",
}

# -- the pieces the patterns are built from ------------------------------------------------------------------------
_S = r"[^\S\n]"  # a space on the same line
_DASH = r"[-.‐‑‒–—―－]"  # a hyphen, a dot or a dash of any width
# between a phone number's digit groups: nothing, a dash (spaces around it allowed) or one or two spaces
_SEP = rf"(?:{_S}{{0,2}}{_DASH}{_S}{{0,2}}|{_S}{{1,2}})?"
# a digit as typed or read out in Korean (공일공 이삼사오 육칠팔구), and the separators read-out numbers use (에)
_DIGIT = r"[0-9공영일이삼사오육륙칠팔구]"
_SPOKEN_SEP = rf"(?:{_S}{{0,2}}(?:{_DASH}|에){_S}{{0,2}}|{_S}{{1,2}})?"
# an e-mail address's parts: a local part in Latin letters or in Hangul; a domain's labels (IDN labels in Hangul)
_LOCAL = r"(?:(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*|(?<![\w.%+-])[가-힣][가-힣0-9._-]*)"
_LABEL = r"[A-Za-z0-9가-힣](?:[A-Za-z0-9가-힣-]*[A-Za-z0-9가-힣])?"
_HANGUL_TLD = r"(?:한국|닷컴|닷넷|삼성)"  # the Hangul top-level domains


def _bracketed(words: str) -> str:
    """One of `words` in brackets, spaces allowed around: (at), [dot], <at>."""
    return rf"{_S}*[(\[{{<]{_S}*(?:{words}){_S}*[)\]}}>]{_S}*"


# spelled out: "at", "(at)", 골뱅이, 앳 for @; "dot", "(dot)", 점, 쩜, 닷 or an unspaced "." for a dot; a known
# top-level domain in small or capital letters or read out (컴, 넷)
_AT = rf"(?:{_bracketed('at|AT|골뱅이|앳')}|{_S}+(?:at|AT|앳){_S}+|{_S}*(?:@|골뱅이){_S}*)"
_DOT = rf"(?:{_bracketed('dot|DOT|점|닷')}|{_S}+(?:dot|DOT){_S}+|\.|{_S}*(?:점|쩜|닷){_S}*)"
_TLDS = "com|net|org|edu|gov|kr|io|me|co|ac|info|biz|jp|us"
_SPELLED_TLD = rf"(?:(?:{_TLDS}|{_TLDS.upper()})(?![A-Za-z0-9])|컴|넷|케이알|한국)"
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
# a building or lot number: 212, 1600-3번지, 지하 110, 산 12-3 (a lot on a hill), but not "3시"
_NUMBER = rf"(?:(?:지하|산)\s*)?\d{{1,5}}(?:-\d{{1,5}})?(?:번지|(?![\d-]|\s*{_COUNTER}))"
# a flat: 101동 1203호, not a room (101호실), a line (2호선), a car (3호차) or an issue (1호기)
_FLAT = r"\d{1,4}동\s*\d{1,5}호(?![실선차기])"
_UNIT = rf"(?:\s*,?\s*(?:[A-Za-z가-힣0-9]{{0,12}}\s*)?{_FLAT}|\s*,?\s*\d{{1,5}}호|\s*,?\s*\d{{1,3}}층)?"
_PLACE = rf"(?:(?:{_TOWN})\s*{_NUMBER}|{_ROAD}\s*{_NUMBER})"
# a block of flats' name before 101동 1203호: a word ending like one (래미안, 상암월드컵파크, 7단지, 행복아파트)
_COMPLEX = (
    r"(?:(?<![가-힣A-Za-z0-9])[가-힣A-Za-z0-9]{0,12}(?:아파트|APT|빌라|맨션|타운|단지|파크|빌|캐슬|자이|힐스테이트|"
    r"래미안|푸르지오|아이파크|더샵|스위첸|e편한세상|하이츠|오피스텔)\s*){1,2}"
)
_BANK = r"(?:계좌|통장|은행|뱅크|입금|송금|국민|신한|우리|하나|농협|기업|카카오|토스|새마을|우체국|수협|신협|SC|씨티)"
# a number after these words is an order, tracking or booking number: kept
_ORDER = r"(?:주문|송장|운송장|배송|예약|접수|승인|회원|쿠폰|티켓)"

# a date and a serial (2026-11-03-01, 2026.11.03.12): a report's or a document's number
_DATED = r"(?:19|20)\d{2}[-.](?:0?[1-9]|1[0-2])[-.](?:0?[1-9]|[12]\d|3[01])[-.]\d{1,4}(?![\d-])"
# shortly after a word that says it is an account: a run of 10-14 digits, or groups with hyphens or spaces between
# ("국민은행 123456789012", "신한 110 123 456789", "카카오뱅크 3333 01 1234567")
_ACCOUNT_AFTER_BANK = re.compile(
    rf"{_BANK}(?:(?!{_ORDER})[^\d\n]){{0,12}}?(?<![\d-])"
    r"(?P<pii>(?=(?:\d[- ]?){9,13}\d(?![\d-]|[- ]\d))\d{2,14}(?:[- ]\d{1,7}){0,4})(?![\d-]|[- ]\d)"
)

# -- kind, pattern: in this order, so an e-mail's or a card's digits are never taken for a phone or an account. ---
# A pattern with a group `pii` replaces only that group (the rest is context it needs); a match with a group `keep`
# is left as it is (it matched only so that the number in it is not taken by the same pattern).
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # an account named as one comes first: its digits may look like a resident number (우리은행 1002123456789)
    ("account", _ACCOUNT_AFTER_BANK),
    # minji.kim@example.com, 홍길동@예시.한국, minji@예시.com, minji@xn--9n2bp8q.xn--3e0b707e (punycode)
    (
        "email",
        re.compile(
            rf"{_LOCAL}@{_LABEL}(?:\.{_LABEL})*\.(?:xn--[a-z0-9-]+|[A-Za-z]{{2,}}(?![A-Za-z0-9])|{_HANGUL_TLD})"
        ),
    ),
    # spelled out: minsu at gmail dot com, minsu 골뱅이 naver 점 com, minsu(at)gmail(dot)co(dot)kr,
    # 민수 골뱅이 네이버 닷컴
    (
        "email",
        re.compile(
            rf"(?:(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*|(?<![\w.%+-])[가-힣]{{1,10}})"
            rf"{_AT}(?:{_LABEL}{_DOT})+{_SPELLED_TLD}"
        ),
    ),
    # 900101-2345678, 9001012345678, 020304-4******
    (
        "resident_number",
        re.compile(
            r"(?<![\d-])\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\s?-?\s?[1-8]"
            r"(?:\d{6}|\*{6})(?![\d*])"
        ),
    ),
    # given in two halves after the word that names it: 주민번호 앞자리는 900101이고 뒷자리는 2345678, 900101 / 2345678
    (
        "resident_number",
        re.compile(
            r"주민(?:등록)?(?:번호)?[^\d\n]{0,12}?(?<!\d)(?P<pii>\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
            rf"(?!\s*{_COUNTER})[^\d\n]{{1,12}}?[1-8]\d{{6}})(?!\d|\s*{_COUNTER})"
        ),
    ),
    # 1234-5678-9012-3456, 1234 5678 9012 3456, 1234-5678 9012.3456 (separators mixed), 1234567890123456,
    # 3782-822463-10005 (AmEx)
    (
        "card",
        re.compile(r"(?<![\d-])(?:\d{4}[- .]\d{4}[- .]\d{4}[- .]\d{4}|\d{16}|\d{4}([- ])\d{6}\1\d{5})(?![\d-])"),
    ),
    # 010-2345-6789, 01023456789, 010 2345 6789, 010.2345.6789, 010 - 2345 - 6789, 010–2345–6789, 02-123-4567,
    # (031) 123-4567, +82 10-2345-6789, +82 (0)2-123-4567, 070-1234-5678, 0505-123-4567
    (
        "phone",
        re.compile(
            r"(?<![\d+])(?:\+82[- ]?\(?0?\)?[- ]?(?:1[016789]|2|[3-6][1-5]|70)\)?"
            r"|\(?0(?:1[016789]|2|[3-6][1-5]|70|50\d)\)?)"
            rf"{_SEP}\d{{3,4}}{_SEP}\d{{4}}(?![\d-])"
        ),
    ),
    # a mobile number read out in Korean, whole or in part: 공일공 이삼사오 육칠팔구, 영일영에 이삼사오에 육칠팔구,
    # 010 이삼사오 육칠팔구 (a Korean word may follow: 육칠팔구야)
    (
        "phone",
        re.compile(
            rf"(?<![0-9가-힣+])[0공영][1일][016789공영일육륙칠팔구]{_SPOKEN_SEP}{_DIGIT}{{3,4}}{_SPOKEN_SEP}{_DIGIT}{{4}}"
            r"(?![0-9])"
        ),
    ),
    # digit groups joined by hyphens, 10-14 digits in all (110-123-456789, 3333-01-1234567); after 주문번호 kept, and
    # a dated number (a report's 2026-11-03-01) is no account
    (
        "account",
        re.compile(
            rf"(?P<keep>{_ORDER}[^\d\n]{{0,8}}?)?"
            rf"(?<![\d-])(?!{_DATED})(?=(?:\d-?){{10,14}}(?![\d-]))\d{{2,6}}(?:-\d{{2,7}}){{2,3}}(?![\d-])"
        ),
    ),
    # a street or lot address down to the number, with the flat: 서울시 마포구 월드컵로 212, 중구 을지로3가 12,
    # 경기도 성남시 분당구 판교역로 235 101동 202호, 마포구 상암동 1600-3번지, 마포구 상암동 산 12-3,
    # 종로구 세종대로 지하 110, 서울시 마포구, 월드컵로 212 (a comma between its parts)
    (
        "address",
        re.compile(
            rf"(?:{_PROVINCE},?\s*(?:{_DISTRICT},?\s*){{0,2}}|(?:{_DISTRICT},?\s*){{1,2}})"
            rf"{_PLACE}{_UNIT}(?!\d)"
        ),
    ),
    # a flat without its street: 101동 1203호, 래미안 101동 1203호, 상암월드컵파크 7단지 101동 1203호
    ("address", re.compile(rf"(?:{_COMPLEX}|(?<![\d가-힣]))(?<!\d){_FLAT}(?!\d)")),
)


class Scrubber:
    """Replaces personal data by tags and counts what it replaced, per kind, over every text it was given."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for kind, pattern in PATTERNS:
            text = pattern.sub(partial(self._tag, kind), text)
        return text

    def _tag(self, kind: str, match: re.Match[str]) -> str:
        """The match with its personal data (the group `pii`, else all of it) replaced, unless it is one to keep."""
        groups = match.groupdict()
        if groups.get("keep") is not None:
            return match.group(0)
        self.counts[kind] += 1
        if "pii" not in groups:
            return TAGS[kind]
        start, end = match.span("pii")
        return match.string[match.start() : start] + TAGS[kind] + match.string[end : match.end()]

    def report(self) -> dict[str, int]:
        """Counts per kind, every kind listed (0 where none was found)."""
        return {kind: self.counts.get(kind, 0) for kind in TAGS}


def scrub(text: str) -> str:
    """One text with its personal data replaced by tags."""
    return Scrubber()(text)
