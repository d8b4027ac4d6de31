"""English words for counts in every command's output and report ('1 session', '2 sessions') and elapsed times:
the CLI, the trial report, training and evaluation all use these (the lowest layer that needs them is evaluation;
here, below it, any layer may)."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """The count with its noun in the right number: plural(1, "attempt") is '1 attempt', plural(0, "attempt")
    '0 attempts'; `many` for a plural that is not noun + 's'."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def elapsed(seconds: float) -> str:
    """'4.2 s' under a minute, else '13 min 05 s'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"


# -- Korean particles that fit the word before them ---------------------------------------------------------
# each particle's (after a final consonant, after a vowel) forms; 으로/로 also takes 로 after ㄹ
PARTICLES = {
    **dict.fromkeys(("이", "가"), ("이", "가")),
    **dict.fromkeys(("을", "를"), ("을", "를")),
    **dict.fromkeys(("은", "는"), ("은", "는")),
    **dict.fromkeys(("과", "와"), ("과", "와")),
    **dict.fromkeys(("으로", "로"), ("으로", "로")),
    **dict.fromkeys(("이에요", "예요"), ("이에요", "예요")),
}
RIEUL = 8  # ㄹ's index among a Hangul syllable's final consonants
# the final consonant of a number's last read syllable (Sino-Korean): 영 일 이 삼 사 오 육 칠 팔 구; 십 백 천 만
DIGIT_FINALS = (21, 8, 0, 16, 0, 0, 1, 8, 8, 0)
POWER_FINALS = ((10, 17), (100, 1), (1000, 4), (10000, 4))


def final_consonant(word: str) -> int:
    """The final consonant (jongseong index, 0 for none) the word ends on when read aloud: a Hangul syllable's own,
    a number's as read in Sino-Korean ("5" 오: 0, "10" 십: ㅂ); a word ending otherwise (Latin letters, marks) as a
    vowel."""
    word = word.rstrip(" )\"'”’")
    digits = len(word) - len(word.rstrip("0123456789"))
    if digits:
        number = int(word[len(word) - digits :])
        if number == 0 or number % 10:
            return DIGIT_FINALS[number % 10]
        for power, final in reversed(POWER_FINALS):
            if number % power == 0:
                return final
    if word and "가" <= word[-1] <= "힣":
        return (ord(word[-1]) - ord("가")) % 28
    return 0


def particle(word: object, form: str) -> str:
    """`word` with the form of the particle that fits it: particle(5, "으로") is '5로', particle(3, "으로") '3으로',
    particle("v1", "을") 'v1을', particle("기억", "가") '기억이'."""
    text = str(word)
    consonant, vowel = PARTICLES[form]
    final = final_consonant(text)
    if consonant == "으로":
        return text + ("로" if final in (0, RIEUL) else "으로")
    return text + (consonant if final else vowel)
