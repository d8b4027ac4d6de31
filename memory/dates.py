"""Time in memory sentences: relative Korean time words resolved to absolute ones when a sentence is written, past
plans turned into the past, and dates shown relative to today.

A memory sentence is stored with absolute times ("사용자는 2026년 12월 8일에 시험이 있다"), never "다음 주 화요일",
which would mean another day a week later. `anchor` resolves what a session's sentence says against the session's
date, with the grain that was said: a day ("내일", "3일 뒤", "다음 주 화요일", "12월 8일"), a weekend ("이번 주말"),
a week ("다음 주"), a month ("다음 달"), a season ("작년 여름") or a year ("내년"), and returns the words that were
said beside it, for display. `settle` turns a sentence whose time has passed from a plan into the past ("시험이
있다" -> "시험이 있었다", "갈 예정이다" -> "갈 예정이었다"), so memory never keeps a past plan as one to come.
`relative` writes a stored sentence for today's reader ("2026년 12월 8일(사흘 전)").

Library or rules: dateparser (the one well-kept date library with a Korean locale) misses most of these (모레,
"3일 뒤", "이번 주말", "다음 주 화요일" it reads as two dates, seasons) and has no notion of grain; Kiwi does not tag
time expressions. So the time words are rules here, and Kiwi (memory/korean.py) conjugates the predicate: its
`join` puts 었/았/였 where Korean grammar wants them. What these rules do not cover is left as the words were said,
never dropped: a sentence with no time word it knows is stored as written.

Not resolved: a habit ("매주 화요일", "주말마다"), a recurring day (a birthday or an anniversary keeps its month and
day without a year, and never becomes past), a start of something ongoing ("2026년 3월부터 다닌다" stays present).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

WEEKDAYS = "월화수목금토일"
SEASONS = {"봄": (3, 5), "여름": (6, 8), "가을": (9, 11), "겨울": (12, 2)}
ORDINALS = ("첫째", "둘째", "셋째", "넷째", "다섯째")
NATIVE_DAYS = {"하루": 1, "이틀": 2, "사흘": 3, "나흘": 4, "닷새": 5, "엿새": 6, "이레": 7, "열흘": 10}
NATIVE_COUNT = {"한": 1, "두": 2, "세": 3, "네": 4, "다섯": 5, "여섯": 6}
RECURRING = ("생일", "기념일", "생신", "제사", "기일")  # a day that comes back every year: month and day, no year
ONGOING_AFTER = re.compile(r"^\s*(?:부터|이후|이래)")  # "2026년 3월부터 다닌다": the start of something still going
PARTICLE = re.compile(
    r"^(?:에는|에도|에서|에|엔|부터|까지|쯤|께|경|중|내내|이나|이|가|은|는|도|의|로|으로|만|과|와|하고|동안|간)"
)
HABIT_BEFORE = re.compile(r"(?:매|매번|격)\s*(?:주|달|월|년)?\s*$")


@dataclass(frozen=True)
class Span:
    """A time said in a sentence: where (character offsets), its grain, and the days it covers."""

    start: int
    end: int
    grain: str  # day | weekend | week | month | season | year
    first: date
    last: date
    absolute: bool  # already written as `anchor` writes it (with its year)


# -- calendar helpers ---------------------------------------------------------------------------------------------
def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_end(year: int, month: int) -> date:
    return (date(year + month // 12, month % 12 + 1, 1)) - timedelta(days=1)


def _add_months(year: int, month: int, n: int) -> tuple[int, int]:
    k = year * 12 + month - 1 + n
    return k // 12, k % 12 + 1


def _season(year: int, name: str) -> tuple[date, date]:
    start, end = SEASONS[name]
    last_year = year + 1 if end < start else year
    return date(year, start, 1), _month_end(last_year, end)


def _day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _week_of(day: date) -> tuple[int, int, int]:
    """(year, month, ordinal) naming the Monday-to-Sunday week of `day` by its Thursday: "2026년 12월 둘째 주"."""
    thursday = _monday(day) + timedelta(days=3)
    return thursday.year, thursday.month, (thursday.day - 1) // 7 + 1


def _week_start(year: int, month: int, ordinal: int) -> date | None:
    first_thursday = date(year, month, 1) + timedelta(days=(3 - date(year, month, 1).weekday()) % 7)
    thursday = first_thursday + timedelta(weeks=ordinal - 1)
    return thursday - timedelta(days=3) if thursday.month == month else None


def _season_name(span: Span) -> str:
    return next(n for n, (start, _) in SEASONS.items() if start == span.first.month)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NATIVE_COUNT.get(word, 0)


# -- the patterns: (regex, resolver(match, today, past) -> Span fields or None), longest forms first ---------------
Resolved = tuple[str, date, date] | None
Resolver = Callable[[re.Match[str], date, bool], Resolved]
_WEEK_WORD = r"(다다음\s*주|다음\s*주|담주|이번\s*주|금주|저번\s*주|지난\s*주|지지난\s*주)"
_WEEK_SHIFT = {
    "다다음주": 2,
    "다음주": 1,
    "담주": 1,
    "이번주": 0,
    "금주": 0,
    "저번주": -1,
    "지난주": -1,
    "지지난주": -2,
}
_MONTH_SHIFT = {"다다음달": 2, "다음달": 1, "담달": 1, "이번달": 0, "저번달": -1, "지난달": -1}
_YEAR_SHIFT = {"올해": 0, "금년": 0, "올": 0, "내년": 1, "내후년": 2, "작년": -1, "지난해": -1, "재작년": -2}


def _shift(table: dict[str, int], word: str) -> int:
    return table[re.sub(r"\s", "", word)]


def _abs_weekend(m: re.Match[str], today: date, past: bool) -> Resolved:
    first = _day(int(m["y"]), int(m["m"]), int(m["d"]))
    return ("weekend", first, first + timedelta(days=1)) if first else None


def _abs_week(m: re.Match[str], today: date, past: bool) -> Resolved:
    start = _week_start(int(m["y"]), int(m["m"]), ORDINALS.index(m["o"]) + 1)
    return ("week", start, start + timedelta(days=6)) if start else None


def _abs_day(m: re.Match[str], today: date, past: bool) -> Resolved:
    day = _day(int(m["y"]), int(m["m"]), int(m["d"]))
    return ("day", day, day) if day else None


def _iso_day(m: re.Match[str], today: date, past: bool) -> Resolved:
    return _abs_day(m, today, past)


def _abs_season(m: re.Match[str], today: date, past: bool) -> Resolved:
    return ("season", *_season(int(m["y"]), m["s"]))


def _abs_month(m: re.Match[str], today: date, past: bool) -> Resolved:
    month = int(m["m"])
    return ("month", date(int(m["y"]), month, 1), _month_end(int(m["y"]), month)) if 1 <= month <= 12 else None


def _abs_year(m: re.Match[str], today: date, past: bool) -> Resolved:
    return "year", date(int(m["y"]), 1, 1), date(int(m["y"]), 12, 31)


def _month_day(m: re.Match[str], today: date, past: bool) -> Resolved:
    """'12월 8일' without a year: this year's, unless that is long past (then next year's; a past tense: this
    year's, unless still to come, then last year's)."""
    day = _day(today.year, int(m["m"]), int(m["d"]))
    if day is None:
        return None
    if past and day > today:
        day = _day(today.year - 1, day.month, day.day) or day
    elif not past and day < today - timedelta(days=31):
        day = _day(today.year + 1, day.month, day.day) or day
    return "day", day, day


def _year_word_date(m: re.Match[str], today: date, past: bool) -> Resolved:
    year = today.year + _shift(_YEAR_SHIFT, m["w"])
    if m["s"]:
        return ("season", *_season(year, m["s"]))
    if m["m"]:
        month = int(m["m"])
        if not 1 <= month <= 12:
            return None
        if m["d"]:
            day = _day(year, month, int(m["d"]))
            return ("day", day, day) if day else None
        return "month", date(year, month, 1), _month_end(year, month)
    return "year", date(year, 1, 1), date(year, 12, 31)


def _season_word(m: re.Match[str], today: date, past: bool) -> Resolved:
    """'이번 여름', '지난 겨울', '다음 봄': the one now or next to come (지난: the last one over)."""
    name, word = m["s"], re.sub(r"\s", "", m["w"])
    for year in (today.year - 1, today.year, today.year + 1):
        first, last = _season(year, name)
        if word in ("이번", "올") and (first <= today <= last or (first > today and not past)):
            return "season", first, last
    candidates = [_season(y, name) for y in range(today.year - 2, today.year + 2)]
    if word in ("지난", "작년"):
        over = [c for c in candidates if c[1] < today]
        return ("season", *over[-1]) if over else None
    ahead = [c for c in candidates if c[0] > today]
    return ("season", *ahead[0]) if ahead else None


def _relative_day(m: re.Match[str], today: date, past: bool) -> Resolved:
    offsets = {"오늘": 0, "내일": 1, "모레": 2, "글피": 3, "어제": -1, "그제": -2, "그저께": -2, "엊그제": -2}
    day = today + timedelta(days=offsets[m["w"]])
    return "day", day, day


def _in_days(m: re.Match[str], today: date, past: bool) -> Resolved:
    n = int(m["n"]) if m["n"] else NATIVE_DAYS[m["k"]]
    day = today + timedelta(days=-n if m["dir"] == "전" else n)
    return "day", day, day


def _in_weeks(m: re.Match[str], today: date, past: bool) -> Resolved:
    n = _count(m["n"]) if m["n"] else 1
    day = today + timedelta(weeks=-n if m["dir"] == "전" else n)
    return "week", _monday(day), _monday(day) + timedelta(days=6)


def _in_months(m: re.Match[str], today: date, past: bool) -> Resolved:
    n = _count(m["n"])
    year, month = _add_months(today.year, today.month, -n if m["dir"] == "전" else n)
    return "month", date(year, month, 1), _month_end(year, month)


def _in_years(m: re.Match[str], today: date, past: bool) -> Resolved:
    year = today.year + (-1 if m["dir"] == "전" else 1) * _count(m["n"])
    return "year", date(year, 1, 1), date(year, 12, 31)


def _week_weekday(m: re.Match[str], today: date, past: bool) -> Resolved:
    day = _monday(today) + timedelta(weeks=_shift(_WEEK_SHIFT, m["w"]), days=WEEKDAYS.index(m["d"]))
    return "day", day, day


def _weekend(m: re.Match[str], today: date, past: bool) -> Resolved:
    shift = _shift(_WEEK_SHIFT, m["w"] + "주")
    saturday = _monday(today) + timedelta(weeks=shift, days=5)
    return "weekend", saturday, saturday + timedelta(days=1)


def _week(m: re.Match[str], today: date, past: bool) -> Resolved:
    monday = _monday(today) + timedelta(weeks=_shift(_WEEK_SHIFT, m["w"]))
    return "week", monday, monday + timedelta(days=6)


def _weekday(m: re.Match[str], today: date, past: bool) -> Resolved:
    """A bare weekday: the next one to come (today counts), or in a sentence in the past tense the last one."""
    delta = (WEEKDAYS.index(m["d"]) - today.weekday()) % 7
    day = today - timedelta(days=(7 - delta) % 7) if past else today + timedelta(days=delta)
    return "day", day, day


def _month_word(m: re.Match[str], today: date, past: bool) -> Resolved:
    year, month = _add_months(today.year, today.month, _shift(_MONTH_SHIFT, m["w"]))
    return "month", date(year, month, 1), _month_end(year, month)


def _bare_month(m: re.Match[str], today: date, past: bool) -> Resolved:
    """'3월에' without a year: the next March to come, or in the past tense the last one (this month counts)."""
    month = int(m["m"])
    if not 1 <= month <= 12:
        return None
    year = today.year
    if past and month > today.month:
        year -= 1
    elif not past and month < today.month:
        year += 1
    return "month", date(year, month, 1), _month_end(year, month)


_D = r"(?P<d>\d{1,2})"
_PATTERNS: list[tuple[re.Pattern[str], Resolver, bool]] = [  # (pattern, resolver, absolute: already anchor's form)
    (
        re.compile(r"(?P<y>\d{4})년\s*(?P<m>\d{1,2})월\s*(?P<d>\d{1,2})일\s*~\s*(?:\d{1,2}월\s*)?\d{1,2}일\s*주말"),
        _abs_weekend,
        True,
    ),
    (re.compile(r"(?P<y>\d{4})년\s*(?P<m>\d{1,2})월\s*(?P<o>첫째|둘째|셋째|넷째|다섯째)\s*주"), _abs_week, True),
    (re.compile(r"(?P<y>\d{4})년\s*(?P<m>\d{1,2})월\s*" + _D + r"일"), _abs_day, True),
    (re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-" + _D + r"(?!\d)"), _iso_day, False),
    (re.compile(r"(?P<y>\d{4})년\s*(?P<s>봄|여름|가을|겨울)"), _abs_season, True),
    (re.compile(r"(?P<y>\d{4})년\s*(?P<m>\d{1,2})월(?!\s*\d)"), _abs_month, True),
    (re.compile(r"(?P<y>\d{4})년(?!\s*\d{1,2}월)(?!\s*(?:봄|여름|가을|겨울))"), _abs_year, True),
    (
        re.compile(
            r"(?P<w>올해|금년|내년|내후년|작년|지난해|재작년)\s*(?:(?P<s>봄|여름|가을|겨울)|(?P<m>\d{1,2})월"
            r"(?:\s*(?P<d>\d{1,2})일)?)?"
        ),
        _year_word_date,
        False,
    ),
    (re.compile(r"(?<!\d)(?P<m>\d{1,2})월\s*" + _D + r"일"), _month_day, False),
    (re.compile(r"(?P<w>이번|올|지난|작년|다음)\s*(?P<s>봄|여름|가을|겨울)"), _season_word, False),
    (re.compile(_WEEK_WORD.replace("(", "(?P<w>", 1) + r"\s*(?P<d>[월화수목금토일])요일"), _week_weekday, False),
    (re.compile(r"(?P<w>다다음|다음|담|이번|금|저번|지난|지지난)\s*(?:주\s*)?주말"), _weekend, False),
    (re.compile(r"(?P<w>엊그제|그저께|그제|어제|오늘|내일|모레|글피)"), _relative_day, False),
    (
        re.compile(r"(?:(?P<n>\d+)\s*일|(?P<k>하루|이틀|사흘|나흘|닷새|엿새|이레|열흘))\s*(?P<dir>뒤|후|전)"),
        _in_days,
        False,
    ),
    (re.compile(r"(?:(?P<n>\d+|한|두|세|네)\s*주(?:일)?|일주일)\s*(?P<dir>뒤|후|전)"), _in_weeks, False),
    (re.compile(r"(?P<n>\d+|한|두|세|네|다섯|여섯)\s*(?:달|개월)\s*(?P<dir>뒤|후|전)"), _in_months, False),
    (re.compile(r"(?P<n>\d+|한|두|세)\s*년\s*(?P<dir>뒤|후|전)"), _in_years, False),
    (re.compile(_WEEK_WORD.replace("(", "(?P<w>", 1)), _week, False),
    (re.compile(r"(?P<w>다다음\s*달|다음\s*달|담달|이번\s*달|저번\s*달|지난\s*달)"), _month_word, False),
    (re.compile(r"(?<![\d년])(?P<m>\d{1,2})월(?!\s*\d)"), _bare_month, False),
    (re.compile(r"(?<![가-힣])(?P<d>[월화수목금토일])요일"), _weekday, False),
]


def _ends_word(text: str, end: int) -> bool:
    """The time word ends there: what follows is not Hangul, or a particle ("다음 주에", not "다음 주제")."""
    rest = text[end:]
    if not rest or not ("가" <= rest[0] <= "힣"):
        return True
    return bool(PARTICLE.match(rest)) and not rest.startswith("마다")


def _starts_word(text: str, start: int) -> bool:
    return start == 0 or not ("가" <= text[start - 1] <= "힣") or text[start - 1] in "는은이가에도"


def find(text: str, today: date, tense: bool = True) -> list[Span]:
    """Every time this module knows in `text`, resolved against `today` (a sentence's own date), in order; a habit
    ("매주", "마다") is not a time. `tense=False` reads the sentence as present without asking Kiwi: right for a time
    written with its year, whose days no tense changes (memory/when.py reads a whole memory's so)."""
    past: bool | None = None if tense else False  # the tense (Kiwi) only for a sentence with a time: most have none
    taken: list[Span] = []
    for pattern, resolve, absolute in _PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span()
            if any(start < s.end and s.start < end for s in taken):
                continue
            if not _ends_word(text, end) or not _starts_word(text, start) or HABIT_BEFORE.search(text[:start]):
                continue
            if text[end:].lstrip().startswith("마다"):
                continue
            if past is None:
                past = is_past_tense(text)
            got = resolve(m, today, past)
            if got is not None:
                taken.append(Span(start, end, got[0], got[1], got[2], absolute))
    return sorted(taken, key=lambda s: s.start)


def recurring(text: str) -> bool:
    """A day that comes back every year (a birthday, an anniversary): no year, never past."""
    return any(word in text for word in RECURRING)


def written(span: Span, keep_year: bool = True) -> str:
    """A span as `anchor` stores it: '2026년 12월 8일', '2026년 12월 5일~6일 주말', '2026년 12월 둘째 주',
    '2026년 12월', '2026년 여름', '2026년'; `keep_year=False`: '12월 8일' (a recurring day)."""
    first, last = span.first, span.last
    if span.grain == "day":
        return f"{first.year}년 {first.month}월 {first.day}일" if keep_year else f"{first.month}월 {first.day}일"
    if span.grain == "weekend":
        end = f"{last.month}월 {last.day}일" if last.month != first.month else f"{last.day}일"
        return f"{first.year}년 {first.month}월 {first.day}일~{end} 주말"
    if span.grain == "week":
        year, month, ordinal = _week_of(first)
        return f"{year}년 {month}월 {ORDINALS[ordinal - 1]} 주"
    if span.grain == "month":
        return f"{first.year}년 {first.month}월"
    if span.grain == "season":
        return f"{first.year}년 {_season_name(span)}"
    return f"{first.year}년"


def anchor(text: str, today: date) -> tuple[str, list[dict[str, str]]]:
    """`text` with every relative or partial time resolved against `today` and written absolute, and what was said:
    [{"said": "다음 주 화요일", "as": "2026년 12월 8일", "on": "2026-12-03"}, ...]. Absolute times stay as they
    are; a sentence with none it knows comes back unchanged."""
    keep_year = not recurring(text)
    out, said, at = [], [], 0
    for span in find(text, today):
        words = text[span.start : span.end]
        if span.absolute:
            continue
        new = written(span, keep_year)
        particle = "에" if text[span.end : span.end + 1].isspace() and span.grain != "year" else ""  # 내일 면접
        out += [text[at : span.start], new + particle]
        at = span.end
        if new != words:
            said.append({"said": words, "as": new, "on": today.isoformat()})
    return ("".join(out) + text[at:], said) if said else (text, [])


# -- tense -----------------------------------------------------------------------------------------------------
_PAST_EP = ("었", "았", "였", "었었", "았었", "ᆻ")
_FINAL = ("EF", "EC")


def _final(text: str) -> tuple[list[Any], int] | None:
    """Kiwi's tokens of the sentence and the index of its final ending '다' (declarative), or None."""
    from memory.korean import kiwi

    tokens = kiwi().tokenize(text)
    for i in range(len(tokens) - 1, -1, -1):
        t = tokens[i]
        if t.tag.startswith("S"):
            continue
        return (tokens, i) if t.tag in _FINAL and t.form.endswith("다") else None
    return None


def is_past_tense(text: str) -> bool:
    """The sentence's last predicate is in the past tense ('봤다', '예정이었다', '했다')."""
    found = _final(text)
    if found is None:
        return False
    tokens, i = found
    word_start = text.rfind(" ", 0, tokens[i].start) + 1
    return any(t.tag == "EP" and t.form in _PAST_EP for t in tokens[:i] if t.start >= word_start)


def to_past(text: str) -> str:
    """The sentence with its last predicate put in the past tense ('있다' -> '있었다', '간다' -> '갔다',
    '예정이다' -> '예정이었다'); unchanged when it is already past or not a declarative '-다' sentence."""
    from memory.korean import kiwi

    found = _final(text)
    if found is None or is_past_tense(text):
        return text
    tokens, i = found
    final = tokens[i]
    word_start = text.rfind(" ", 0, final.start) + 1
    morphs = [(t.form, t.tag) for t in tokens[:i] if t.start >= word_start]
    if not morphs:
        return text
    if final.form in ("ᆫ다", "는다", "ㄴ다"):  # present tense of a verb: 간다, 먹는다
        pass
    elif final.form != "다":
        return text
    joined = kiwi().join([*morphs, ("었", "EP"), ("다", "EF")])
    return text[:word_start] + joined + text[final.end :]


def _in_final_clause(text: str, at: int) -> bool:
    """No connective ending between `at` and the sentence's last predicate: the time there is the predicate's own
    ("12월 8일에 시험이 있다"), not a clause's before it ("10월에 수술을 받아 잘 보여서 기뻐한다": a state now)."""
    found = _final(text)
    if found is None:
        return False
    tokens, i = found
    word_start = text.rfind(" ", 0, tokens[i].start) + 1
    return not any(t.tag == "EC" and at <= t.start < word_start for t in tokens[:i])


def settle(text: str, today: date) -> str:
    """A sentence whose every time has passed (before `today`) and whose predicate still says it is to come, put in
    the past; a recurring day, the start of something ongoing ("...부터 다닌다"), a time of an earlier clause
    (a present state after a past event) and a sentence with no time stay."""
    spans = [s for s in find(text, today) if s.absolute or s.grain]
    if not spans or recurring(text) or any(ONGOING_AFTER.match(text[s.end :]) for s in spans):
        return text
    if all(s.last < today for s in spans) and _in_final_clause(text, spans[-1].end):
        return to_past(text)
    return text


# -- reading a stored sentence today ---------------------------------------------------------------------------
NATIVE = ("", "한", "두", "세", "네", "다섯", "여섯", "일곱", "여덟", "아홉", "열", "열한")


def _ago(n: int, unit: str, future: bool) -> str:
    count = f"{NATIVE[n]} 달" if unit == "달" and n < len(NATIVE) else f"{n}{unit}"  # 두 달 전, 3주 전
    return f"{count} {'뒤' if future else '전'}"


def relative_words(span: Span, today: date) -> str:
    """How far `span` is from `today`, in Korean: '오늘', '내일', '사흘 전', '다음 주 화요일', '지난주', '다음 달',
    '작년 여름', '2년 전'."""
    if span.first <= today <= span.last and span.grain != "day":
        return {"weekend": "이번 주말", "week": "이번 주", "month": "이번 달", "year": "올해"}.get(
            span.grain, f"이번 {_season_name(span)}"
        )
    if span.grain in ("day",):
        days = (span.first - today).days
        named = {0: "오늘", 1: "내일", 2: "모레", -1: "어제", -2: "그제", 3: "사흘 뒤", -3: "사흘 전"}
        if days in named:
            return named[days]
        weeks = (_monday(span.first) - _monday(today)).days // 7
        if weeks in (-1, 0, 1):
            return f"{('지난주', '이번 주', '다음 주')[weeks + 1]} {WEEKDAYS[span.first.weekday()]}요일"
        return _distance(days, span.first > today)
    if span.grain in ("week", "weekend"):
        weeks = (_monday(span.first) - _monday(today)).days // 7
        suffix = " 주말" if span.grain == "weekend" else ""
        if span.grain == "week" and weeks in (-1, 1, 2):
            return {-1: "지난주", 1: "다음 주", 2: "다다음 주"}[weeks]
        if span.grain == "weekend" and weeks in (-1, 0, 1):
            return {-1: "지난 주말", 0: "이번 주말", 1: "다음 주말"}[weeks]
        return _ago(abs(weeks), "주", weeks > 0) + suffix
    if span.grain == "month":
        months = (span.first.year - today.year) * 12 + span.first.month - today.month
        if months in (-1, 1):
            return "지난달" if months < 0 else "다음 달"
        return _ago(abs(months), "달", months > 0) if abs(months) < 12 else _ago(abs(months) // 12, "년", months > 0)
    years = span.first.year - today.year
    if span.grain == "season":
        name = _season_name(span)
        word = {-1: "작년", 0: "올해", 1: "내년"}.get(years)
        return f"{word} {name}" if word else f"{_ago(abs(years), '년', years > 0)} {name}"
    return {-2: "재작년", -1: "작년", 1: "내년", 2: "내후년"}.get(years) or _ago(abs(years), "년", years > 0)


def _distance(days: int, future: bool) -> str:
    n = abs(days)
    if n < 14:
        return _ago(n, "일", future)
    if n < 60:
        return _ago(round(n / 7), "주", future)
    if n < 365:
        return _ago(round(n / 30.4), "달", future)
    return _ago(n // 365, "년", future)


def relative(text: str, today: date) -> str:
    """A stored sentence as today's reader needs it: each absolute time followed by how far it is from today
    ('2026년 12월 8일(사흘 전)'), and a plan whose time has passed in the past tense. What the chat prompt shows."""
    text = settle(text, today)
    out, at = [], 0
    for span in find(text, today):
        if not span.absolute:
            continue
        out += [text[at : span.end], f"({relative_words(span, today)})"]
        at = span.end
    return "".join(out) + text[at:]


def as_read(text: str, today: date) -> str | None:
    """`text` as the chat reads it on `today` (`relative`), when that differs from the stored text: what the memory tab,
    `keem memory show` and the API show beside the sentence."""
    read = relative(text, today)
    return read if read != text else None


def read_on(shown: dict[str, Any], today: date) -> dict[str, Any]:
    """A version's JSON (Version.as_json) with the day it is read on ("read_on") and, for each sentence whose times
    read differently that day, "as_read": what the API and `keem memory show --json` return."""
    sentences = [{**s, **({"as_read": r} if (r := as_read(s["text"], today)) else {})} for s in shown["sentences"]]
    return {**shown, "read_on": today.isoformat(), "sentences": sentences}


def carry(entries: Iterable[dict[str, str]], text: str) -> list[dict[str, str]]:
    """The said-words entries (from the previous memory's sentences) whose absolute time `text` still holds: a
    rewrite that keeps '2026년 12월 8일' keeps what was said for it."""
    seen: dict[str, dict[str, str]] = {}
    for entry in entries:
        if entry.get("as") and entry["as"] in text:
            seen.setdefault(entry["as"], entry)
    return list(seen.values())
