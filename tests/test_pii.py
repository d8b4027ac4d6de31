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

# the forms people type besides the written ones: read out, spaced, spelled, a flat without its street
SPOKEN_AND_SPELLED = [
    # phone numbers read out in Korean, whole or in part, with the separators speech uses
    ("번호는 공일공 이삼사오 육칠팔구", "번호는 [전화번호]"),
    ("공일공 이삼사오 육칠팔구야", "[전화번호]야"),
    ("영일영에 이삼사오에 육칠팔구로 전화해", "[전화번호]로 전화해"),
    ("공일공이삼사오육칠팔구", "[전화번호]"),
    ("010 이삼사오 육칠팔구", "[전화번호]"),
    ("공일공-이삼사-오육칠팔", "[전화번호]"),
    # spaced or mixed separators, dashes of any width
    ("010 2345 6789 / 010.2345.6789 / 010-2345 6789", "[전화번호] / [전화번호] / [전화번호]"),
    ("010 - 2345 - 6789, 010  2345  6789", "[전화번호], [전화번호]"),
    ("010–2345–6789 아니면 010－2345－6789", "[전화번호] 아니면 [전화번호]"),
    ("+82 (0)10 2345 6789", "[전화번호]"),
    # IDN e-mail addresses and spelled-out ones
    ("홍길동@예시.한국으로 보내", "[이메일]으로 보내"),
    ("minji@예시.com, minji@xn--9n2bp8q.xn--3e0b707e 로", "[이메일], [이메일] 로"),
    ("minsu at gmail dot com 으로", "[이메일] 으로"),
    ("MINSU AT GMAIL DOT COM", "[이메일]"),
    ("minsu at gmail.com", "[이메일]"),
    ("minsu 골뱅이 naver 점 com 이야", "[이메일] 이야"),
    ("minsu(at)gmail(dot)co(dot)kr", "[이메일]"),
    ("minsu [at] gmail [dot] com", "[이메일]"),
    ("민수 골뱅이 네이버 닷컴", "[이메일]"),
    ("minsu @ naver 쩜 com", "[이메일]"),
    # lot numbers on a hill (산)
    ("마포구 상암동 산 12-3", "[주소]"),
    ("마포구 상암동 산12-3번지에 밭이 있어", "[주소]에 밭이 있어"),
    # a flat (동 and 호 together) without its street, with the block's name
    ("101동 1203호", "[주소]"),
    ("래미안 101동 1203호에 살아", "[주소]에 살아"),
    ("래미안101동 1203호", "[주소]"),
    ("상암월드컵파크 7단지 101동 1203호", "[주소]"),
    ("우리 집은 101동 1203호야", "우리 집은 [주소]야"),
    # numbers as people type them: a resident number in two halves, a card with mixed separators, an account
    # spaced oddly or as one run after the bank's name; an address with a comma inside
    ("주민번호 앞자리는 900101이고 뒷자리는 2345678이야", "주민번호 앞자리는 [주민등록번호]이야"),
    ("주민등록번호 900101 / 2345678", "주민등록번호 [주민등록번호]"),
    ("카드 1234-5678 9012 3456", "카드 [카드번호]"),
    ("카드번호 1234 5678-9012.3456 이야", "카드번호 [카드번호] 이야"),
    ("신한 110 123 456789로 보내", "신한 [계좌번호]로 보내"),
    ("카카오뱅크 3333 01 1234567", "카카오뱅크 [계좌번호]"),
    ("국민은행 123456 78 901234 맞아", "국민은행 [계좌번호] 맞아"),
    ("우리은행1002123456789", "우리은행[계좌번호]"),
    ("서울시 마포구, 월드컵로 212", "[주소]"),
    ("서울시, 마포구 월드컵로 212 근처야", "[주소] 근처야"),
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

# near-misses of the wider forms that must stay: dates, prices, times, versions, order numbers, counts and rooms
NEAR_MISSES = [
    "2026-11-03에 만나",
    "2026.11.03 발표",
    "2026/11/03",
    "11월 3일",
    "오늘 2026년 11월 3일 14시 30분에 12,000원 냈어",
    "12,000원",
    "3만 5천원",
    "14:30에 출발",
    "오후 3시",
    "v1.2.3 으로 올렸어",
    "Python 3.11.4",
    "주문번호 20261103-000123",
    "주문번호: 2026-1103-000123",
    "카카오 주문번호 20261103000123",
    "송장번호 6012-3456-7890",
    "3동 중 2동이 공사 중",
    "101호실 강의실",
    "2호선 타고 3호차",
    "이사 오는 날 일이삼 세고",
    "공이 삼사오 육칠",
    "look at this. It is fine",
    "I was at home. Com",
    "골뱅이 무침 점심",
    "민수@회사에서 봐",
    # the near-misses of numbers typed the way people do
    "보고서 2026-11-03-01 참고",
    "결재 2026-11-03-12번 문서",
    "2026.11.03.12 회의록",
    "버전 1.2.3.4",
    "가격 1,234,567원",
    "2026-11-03 10:30",
    "은행 가서 2026 11 03에 30만원 찾았어",
    "국민은행 고객센터 1588-9999",
    "신한카드 12,000원 3개월 할부",
    "주민센터 2층 203호실",
    "주민 900101명 중 2345678원",
    "계좌에 150 000원 남았어",
]


@pytest.mark.parametrize("text, expected", FOUND)
def test_personal_data_in_its_usual_korean_forms_becomes_a_tag(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize("text, expected", SPOKEN_AND_SPELLED)
def test_personal_data_read_out_spaced_or_spelled_becomes_a_tag(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize("text", KEPT + NEAR_MISSES)
def test_ordinary_numbers_dates_places_orders_and_rooms_are_kept(text):
    assert scrub(text) == text


def test_the_scrubber_counts_every_kind_and_a_scrubbed_text_stays_as_it_is():
    scrubber = Scrubber()
    text = "010-2345-6789, minji.kim@example.com, 900101-2345678, 서울시 마포구 월드컵로 212, 010-9876-5432"
    once = scrubber(text)
    assert once == "[전화번호], [이메일], [주민등록번호], [주소], [전화번호]"
    assert scrubber.report() == {"email": 1, "resident_number": 1, "card": 0, "phone": 2, "account": 0, "address": 1}
    assert scrubber(once) == once and scrubber.report()["phone"] == 2
    assert set(scrubber.report()) == set(TAGS) and scrubber("") == ""


def test_the_wider_forms_are_counted_once_each_and_an_order_number_is_not_counted():
    scrubber = Scrubber()
    text = "공일공 이삼사오 육칠팔구, minsu at gmail dot com, 래미안 101동 1203호, 주문번호 2026-1103-000123"
    assert scrubber(text) == "[전화번호], [이메일], [주소], 주문번호 2026-1103-000123"
    assert scrubber.report() == {"email": 1, "resident_number": 0, "card": 0, "phone": 1, "account": 0, "address": 1}
    assert scrub("국민은행 123456789012") == "국민은행 [계좌번호]"  # the bank's name stays, the number goes
