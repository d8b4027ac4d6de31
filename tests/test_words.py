"""Korean particles that fit the number or word before them (memory/words.py particle)."""

from __future__ import annotations

import pytest

from memory.words import final_consonant, particle


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (1, "1로"),
        (2, "2로"),
        (3, "3으로"),
        (5, "5로"),
        (6, "6으로"),
        (7, "7로"),
        (8, "8로"),
        (9, "9로"),
        (0, "0으로"),
        (10, "10으로"),
        (15, "15로"),
        (20, "20으로"),
        (100, "100으로"),
        (1000, "1000으로"),
        (10000, "10000으로"),
    ],
)
def test_euro_after_a_number_follows_how_it_is_read(number, expected):
    assert particle(number, "으로") == expected


def test_each_particle_takes_its_form_after_a_consonant_or_a_vowel():
    assert [particle("v1", "을"), particle("v2", "을"), particle("v3", "과"), particle("v4", "과")] == [
        "v1을",
        "v2를",
        "v3과",
        "v4와",
    ]
    assert (
        particle("기억", "가") == "기억이"
        and particle("사과", "이") == "사과가"
        and particle("서울", "으로") == "서울로"
    )
    assert (
        particle("집", "로") == "집으로" and particle("문장", "는") == "문장은" and particle("10", "예요") == "10이에요"
    )
    assert final_consonant("AI") == 0 and final_consonant("(버전 3)") == 16  # ㅁ, read through the bracket
