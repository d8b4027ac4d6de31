"""Personal data in exported text: Korean phone, e-mail, resident, card and account numbers and street addresses
become tags; ordinary numbers, dates and places stay."""

from __future__ import annotations

import pytest

from chatbot.trials.pii import TAGS, Scrubber, scrub

FOUND = [
    ("제 번호는 010-2345-6789 이에요", "제 번호는 [전화번호] 이에요"),
    ("01023456789로 연락 주세요", "[전화번호]로 연락 주세요"),
    ("집 전화는 02-123-4567", "집 전화는 [전화번호]"),
    ("(031) 123-4567, 010.2345.6789, 010 2345 6789", "[전화번호], [전화번호], [전화번호]"),
    ("해외에서는 +82 10-2345-6789", "해외에서는 [전화번호]"),
    ("+82-2-123-4567 또는 070-1234-5678", "[전화번호] 또는 [전화번호]"),
    ("메일은 minji.kim@example.com 이야", "메일은 [이메일] 이야"),
    ("메일주소minji.kim+trial@mail.example.co.kr으로", "메일주소[이메일]으로"),
    ("주민번호 900101-2345678", "주민번호 [주민등록번호]"),
    ("9001012345678 과 020304-4******", "[주민등록번호] 과 [주민등록번호]"),
    ("카드 1234-5678-9012-3456 / 1234 5678 9012 3456 / 1234567890123456", "카드 [카드번호] / [카드번호] / [카드번호]"),
    ("신한 110-123-456789 로 보내", "신한 [계좌번호] 로 보내"),
    ("계좌번호는 3333-01-1234567 입니다", "계좌번호는 [계좌번호] 입니다"),
    ("국민은행 123456789012 로 입금해줘", "국민은행 [계좌번호] 로 입금해줘"),
    ("서울시 마포구 월드컵로 212에 살아요", "[주소]에 살아요"),
    ("서울특별시 강남구 테헤란로 123-4 5층", "[주소]"),
    ("경기도 성남시 분당구 판교역로 235 101동 202호로 와", "[주소]로 와"),
    ("서울 마포구 월드컵로 212번길 5", "[주소]"),
    ("마포구 상암동 1600-3번지", "[주소]"),
    ("서울특별시 종로구 세종대로 지하 110", "[주소]"),
    ("부산 해운대구 센텀중앙로 79 근처", "[주소] 근처"),
    ("중구 을지로3가 12", "[주소]"),
]

KEPT = [
    "서울 마포구에 살아",
    "2024-01-15에 병원에 갔어",
    "오늘 10시 30분에 시험",
    "친구 집으로 3시에 가",
    "다시 학교로 2번 갔어",
    "가격은 15,000원",
    "버스 7016번",
    "2023년 5월 3일",
    "1588-1234 고객센터",
    "시험 점수가 95점",
    "사용자는 고양이를 키운다",
]


@pytest.mark.parametrize("text, expected", FOUND)
def test_personal_data_in_its_usual_korean_forms_becomes_a_tag(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_numbers_dates_and_places_are_kept(text):
    assert scrub(text) == text


def test_the_scrubber_counts_every_kind_and_a_scrubbed_text_stays_as_it_is():
    scrubber = Scrubber()
    text = "010-2345-6789, minji.kim@example.com, 900101-2345678, 서울시 마포구 월드컵로 212, 010-9876-5432"
    once = scrubber(text)
    assert once == "[전화번호], [이메일], [주민등록번호], [주소], [전화번호]"
    assert scrubber.report() == {"email": 1, "resident_number": 1, "card": 0, "phone": 2, "account": 0, "address": 1}
    assert scrubber(once) == once and scrubber.report()["phone"] == 2
    assert set(scrubber.report()) == set(TAGS) and scrubber("") == ""
