"""Long-horizon memory: simulated users over many sessions, updated by each strategy, scored against the world.

usage: python benchmarks/long_horizon.py [--users 3] [--sessions 30] [--strategies keem accumulate operations]
       [--ceiling 512] [--embedder ngram] [--habit-rate 0.3] [--drop-rate 0.3] [--stale-rate 0.3] [--yes-rate 0]
       [--fail-rate 0]
       [--world classic|unshared] [--seed 0] [--model SPEC] [--json]

Each simulated user has a small world of Korean facts (drawn, seeded, from the lists below): about 30 that never
change (pets, allergies, hobbies, family, food, ...) introduced one or two per session, and four that change at
set sessions (a move, a new job, an exam planned then taken then passed, an illness then recovery). Every session
is a scripted dialogue stating 1-2 facts, or a change, or small talk. The update model is, by default, the
realistic fake (models/fake.py) around an oracle that knows the world and answers every stage ideally; the fake
then spoils the answers as real models do (think blocks, preambles, fences, bullets, an English line, repeated
lines, silently dropped memory lines, free-text verdicts, optional failures) and cuts answers at their budget.

`--world unshared` swaps the four changes for five said in words the old state does not share, as people say
them ("서울 마포구에 산다" -> "부산으로 이사했어"; 회사원 -> 프리랜서; 남자친구 -> 헤어졌어; 담배 -> 금연;
허리 디스크 -> 다 나았어, kept as a past episode with its emotion).
The oracle's verifier fails a memory that holds two states of one fact, naming both, and
`--stale-rate` makes the fake keep, verbatim, a line its ideal rewrite replaced.
Reported per strategy: outdated states still stored, unrelated (stable) facts lost, fallbacks, and the NLI
conflict count per final memory as `keem eval memory` counts it (every pair, the world as the judge).

What it shows: what each strategy's *machinery* does over 30 sessions with a perfect-but-sloppy model: whether
unrelated facts survive (drops, scoping, guard), whether changes replace what they supersede, whether wrapper or
cut text is ever stored, and whether cost per update stays bounded as memory grows (scoped keem should plateau).
What it cannot show: answer quality. The oracle never misreads a dialogue or writes a wrong fact; a real model
does. Run `--model openai:<model>` or `--model hf:<id>` for that (the world then only scores; the fake's habits
are not applied). `--embedder auto` is the app's default (multilingual-e5-small) and slower; `ngram` is the
default here for speed (it only picks which sentences a scoped update rewrites).

The fifth-session idea (issue 23): the exam, illness and new-job chains (the back problem in `--world unshared`)
carry an emotion with its cause, and the world knows after each session which causes are due: ongoing and past
their date (an exam is dated the day it is taken). Each update's emotion records (the shared extraction every
strategy runs) choose the next session's opening as the app does (memory/followup.py `choose`, never the same
twice in a row). Reported: the due events the opening asked about while due, the sessions with something due whose
opening asked about it, openings about a resolved or not-yet-due event (goal 0), records whose status matches the
world after each session (the newest record per cause), and records whose cause is one of the world's.

Scores, on the memory after the last session: a stable fact is kept if memory holds its sentence, a sentence
containing it, or one holding >= 60% of its Kiwi content words (fair to rewrites); a changed fact (one per
chain) is current if its latest state is kept so (or its key word, e.g. the new city, is stored) and no earlier
state's sentence is stored verbatim. "Not stored by it": facts a session stated that its own update did not keep.
Stored text that is neither an oracle sentence nor a rewrite containing one is counted as a user quote (the
never-lose fallback), wrapper (<think>, a fence, an English phrase, a preamble), cut (not ending in 다/요), or
other. Small-talk sessions (weather, lunch) state no world fact; the oracle summarizes them as one dated
sentence ("사용자는 2024년 3월 5일 점심으로 김밥을 먹었다."), which counts toward memory size but is not scored.
With --fail-rate, a failed update keeps the previous memory and that session's facts are gone (the app's job
runner would retry the job at its next start; this does not). Fewer than 30 sessions compress the schedule.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.metrics.conflict import conflicts
from memory.followup import choose
from memory.korean import content_words
from memory.store import EmotionRecord, Sentence
from memory.store.emotions import link
from memory.updaters import STRATEGIES, UpdateInput, make_updater
from models.base import ChatModel, ChatStream, Completion, GenerationOptions, Message
from models.embedders import Embedder
from models.errors import GenerationError
from models.fake import RealisticChatModel, section, stage_of
from models.spec import load_chat_model, load_embedder

WRAPPING = ("think", "preamble", "fences", "numbering", "bullets", "english", "repeat", "free_verdict")
WORLDS = ("classic", "unshared")
CONTAINMENT = 0.6
EMOTION_COUNTS = (
    "due_sessions",
    "openings",
    "asked_due",
    "asked_not_due",
    "due_events",
    "due_events_asked",
    "events",
    "current",
    "records",
    "causes_ok",
)


# -- Korean particles ---------------------------------------------------------------------------------------
def forms(value: str, key: str = "x") -> dict[str, str]:
    """`value` with the particles that fit its last syllable: {x}, {x_eul} (을/를), {x_i}, {x_eun}, {x_ro}, {x_ya}."""
    last = value[-1]
    jong = (ord(last) - 0xAC00) % 28 if "가" <= last <= "힣" else 0
    b = jong != 0
    return {
        key: value,
        f"{key}_eul": value + ("을" if b else "를"),
        f"{key}_i": value + ("이" if b else "가"),
        f"{key}_eun": value + ("은" if b else "는"),
        f"{key}_ro": value + ("으로" if b and jong != 8 else "로"),
        f"{key}_ya": value + ("이야" if b else "야"),
    }


# -- the world ----------------------------------------------------------------------------------------------
# (values, fact, the user's turn, the assistant's reply, the fact with an emotion and its cause or None)
STABLE: list[tuple[tuple[str, ...], str, str, str, str | None]] = [
    (
        ("고양이 두 마리", "강아지 한 마리", "고양이 한 마리", "햄스터 두 마리", "앵무새 한 마리"),
        "사용자는 {x_eul} 키운다.",
        "나 {x} 키우잖아. 오늘 아침에도 나를 깨우더라.",
        "정말 귀엽겠어요!",
        "사용자는 {x_eul} 키우며 무척 귀여워한다.",
    ),
    (
        ("땅콩", "새우", "복숭아", "우유", "달걀", "게"),
        "사용자는 {x} 알레르기가 있다.",
        "나 {x} 알레르기 있어서 외식할 때마다 성분표를 꼭 봐.",
        "늘 조심해야겠네요.",
        None,
    ),
    (
        ("등산", "수영", "테니스", "요가", "볼링", "클라이밍", "낚시"),
        "사용자는 주말마다 {x_eul} 한다.",
        "나 요즘 주말마다 {x} 해. 끝나고 나면 개운해.",
        "좋은 취미네요!",
        "사용자는 주말마다 {x_eul} 하는데, 하고 나면 개운해서 좋아한다.",
    ),
    (
        ("여동생", "남동생", "언니", "오빠", "누나", "형"),
        "사용자는 {x_i} 한 명 있다.",
        "우리 {x_i} 한 명 있는데 어제 같이 밥 먹었어.",
        "사이가 좋으시네요!",
        None,
    ),
    (
        ("제주도", "강릉", "전주", "경주", "여수", "춘천"),
        "사용자는 할머니가 {x}에 사신다.",
        "할머니가 {x}에 사시는데 곧 뵈러 가려고.",
        "할머니가 반가워하시겠어요.",
        None,
    ),
    (
        ("김치찌개", "떡볶이", "냉면", "삼겹살", "초밥", "마라탕", "칼국수"),
        "사용자는 {x_eul} 가장 좋아한다.",
        "내가 제일 좋아하는 음식은 {x_ya}. 일주일에 한 번은 먹어.",
        "맛있죠! 단골집 있어요?",
        None,
    ),
    (
        ("오이", "가지", "당근", "고수", "버섯", "피망"),
        "사용자는 {x_eul} 싫어한다.",
        "나 {x_eun} 진짜 못 먹겠어. 냄새만 맡아도 싫어.",
        "입맛은 어쩔 수 없죠.",
        None,
    ),
    (
        ("아메리카노", "녹차", "두유", "라떼", "보리차"),
        "사용자는 아침마다 {x_eul} 마신다.",
        "나는 아침마다 {x} 한 잔은 꼭 마셔.",
        "아침 루틴이 있으시네요.",
        None,
    ),
    (
        ("피아노", "기타", "우쿨렐레", "드럼", "바이올린", "첼로"),
        "사용자는 {x_eul} 배우고 있다.",
        "나 요즘 학원에서 {x} 배우고 있어.",
        "멋지네요! 어떤 곡 연습해요?",
        "사용자는 {x_eul} 배우고 있어서 즐거워한다.",
    ),
    (
        ("두산 베어스", "LG 트윈스", "롯데 자이언츠", "기아 타이거즈", "한화 이글스", "삼성 라이온즈"),
        "사용자는 프로야구 {x} 팬이다.",
        "나 {x} 팬이잖아. 어제 경기 봤어?",
        "아직 못 봤어요. 이겼어요?",
        None,
    ),
    (
        ("추리", "판타지", "역사", "SF", "무협"),
        "사용자는 {x} 소설을 즐겨 읽는다.",
        "요즘 자기 전에 {x} 소설 읽는 게 낙이야.",
        "추천할 만한 책 있어요?",
        None,
    ),
    (
        ("지하철", "버스", "자전거", "자가용"),
        "사용자는 {x_ro} 출근한다.",
        "나 회사까지 {x_ro} 다녀. 한 40분 걸려.",
        "출근길이 꽤 길네요.",
        None,
    ),
    (
        ("봄", "여름", "가을", "겨울"),
        "사용자는 {x_eul} 가장 좋아하는 계절로 꼽는다.",
        "난 사계절 중에 {x_i} 제일 좋더라.",
        "계절마다 매력이 있죠.",
        None,
    ),
    (
        ("일본", "베트남", "프랑스", "호주", "태국", "스페인"),
        "사용자는 {x}에 여행을 가 본 적이 있다.",
        "예전에 {x} 여행 갔던 게 아직도 생각나.",
        "어디가 제일 좋았어요?",
        "사용자는 {x}에 여행을 가 본 적이 있고 그때를 그리워한다.",
    ),
    (
        ("높은 곳", "거미", "천둥", "깊은 물", "어두운 곳"),
        "사용자는 {x_eul} 무서워한다.",
        "나 사실 {x_i} 너무 무서워.",
        "무서운 건 무서운 거죠.",
        None,
    ),
    (
        ("방울토마토", "상추", "바질", "선인장", "고추"),
        "사용자는 베란다에서 {x_eul} 키운다.",
        "베란다에서 {x} 키우는데 잘 자라고 있어.",
        "직접 키우면 뿌듯하죠!",
        "사용자는 베란다에서 {x_eul} 키우는데 잘 자라서 뿌듯해한다.",
    ),
    (
        ("일본어", "스페인어", "중국어", "프랑스어"),
        "사용자는 퇴근 후에 {x_eul} 공부한다.",
        "나 퇴근하고 {x} 공부하고 있어.",
        "꾸준히 하기 어려운데 대단해요.",
        None,
    ),
    (
        ("유기견 보호소", "동네 도서관", "복지관", "무료 급식소"),
        "사용자는 한 달에 한 번 {x}에서 봉사활동을 한다.",
        "한 달에 한 번 {x}에서 봉사하는데 이번 주말이 그날이야.",
        "좋은 일 하시네요.",
        "사용자는 한 달에 한 번 {x}에서 봉사활동을 하며 보람을 느낀다.",
    ),
    (
        ("우표", "피규어", "엽서", "레고", "마그넷"),
        "사용자는 {x_eul} 모은다.",
        "나 {x} 모으는 게 취미야. 벌써 백 개 넘었어.",
        "와, 엄청 많네요!",
        None,
    ),
    (
        ("치킨", "라면", "족발", "피자", "순대"),
        "사용자는 야식으로 {x_eul} 자주 먹는다.",
        "요즘 밤마다 {x} 시켜 먹어서 큰일이야.",
        "가끔은 괜찮죠!",
        None,
    ),
    (
        ("공포", "로맨스", "액션", "애니메이션", "다큐멘터리"),
        "사용자는 {x} 영화를 좋아한다.",
        "나는 영화는 무조건 {x_i} 좋더라.",
        "요즘 볼 만한 게 많죠.",
        None,
    ),
    (
        ("3월 5일", "7월 19일", "11월 2일", "1월 27일", "9월 14일"),
        "사용자는 생일이 {x}이다.",
        "내 생일은 {x}이야. 기억해 줘!",
        "꼭 기억할게요!",
        None,
    ),
    (
        ("밤 11시", "새벽 1시", "밤 10시", "자정"),
        "사용자는 보통 {x}쯤 잔다.",
        "나는 보통 {x}쯤 자.",
        "규칙적이네요.",
        None,
    ),
    (
        ("된장찌개", "김밥", "카레", "잡채", "계란말이"),
        "사용자는 {x_eul} 잘 만든다.",
        "내가 {x} 하나는 정말 잘 만들어.",
        "나중에 비법 알려 주세요!",
        None,
    ),
    (
        ("조깅", "스트레칭", "줄넘기", "산책"),
        "사용자는 매일 아침 {x_eul} 한다.",
        "매일 아침에 {x} 하고 하루를 시작해.",
        "건강한 습관이네요.",
        None,
    ),
    (
        ("보드게임", "체스", "퍼즐", "온라인 게임"),
        "사용자는 저녁에 친구들과 {x_eul} 즐긴다.",
        "저녁에 친구들이랑 {x} 하는 게 제일 재밌어.",
        "재밌겠어요!",
        None,
    ),
    (
        ("예능", "드라마", "뉴스", "요리 프로그램"),
        "사용자는 저녁마다 텔레비전으로 {x_eul} 본다.",
        "저녁 먹고 나면 텔레비전으로 {x} 보는 게 일과야.",
        "요즘 뭐가 재밌어요?",
        None,
    ),
    (
        ("목포", "안동", "포항", "청주"),
        "사용자는 {x} 출신이다.",
        "나 원래 {x} 출신이야.",
        "고향 얘기 듣고 싶어요.",
        None,
    ),
    (
        ("경영학", "컴퓨터공학", "국문학", "화학"),
        "사용자는 대학에서 {x_eul} 전공했다.",
        "나 대학에서 {x} 전공했어.",
        "그렇군요!",
        None,
    ),
]
TRAITS = [
    ("사용자는 왼손잡이다.", "나 왼손잡이라서 가위 쓸 때 불편해."),
    ("사용자는 안경을 쓴다.", "나 안경 쓰잖아. 마스크 쓰면 김이 서려."),
    ("사용자는 운전면허가 없다.", "나 아직 운전면허가 없어."),
    ("사용자는 커피를 마시면 잠을 못 잔다.", "나는 커피 마시면 밤에 잠을 못 자."),
    ("사용자는 아침형 인간이다.", "나 완전 아침형 인간이야. 다섯 시면 눈이 떠져."),
    ("사용자는 매운 음식을 잘 못 먹는다.", "나 매운 거 진짜 못 먹어."),
]
TRIVIA = [
    ("오늘 비가 엄청 와서 신발이 다 젖었어.", "사용자는 {day}에 비를 맞아 신발이 다 젖었다."),
    ("오늘 점심은 회사 앞 분식집에서 김밥 먹었어.", "사용자는 {day} 점심으로 김밥을 먹었다."),
    ("오늘 날씨가 너무 좋아서 공원을 좀 걸었어.", "사용자는 {day}에 날씨가 좋아서 공원을 걸었다."),
    ("점심에 동료들이랑 짬뽕 먹었는데 너무 매웠어.", "사용자는 {day} 점심으로 짬뽕을 먹었는데 매웠다."),
    ("오늘 미세먼지가 심해서 하루 종일 집에 있었어.", "사용자는 {day}에 미세먼지가 심해서 집에 있었다."),
    ("오늘 눈이 와서 길이 엄청 미끄러웠어.", "사용자는 {day}에 눈이 와서 미끄러운 길을 걸었다."),
]
OPENERS = ["오늘 하루 어땠어요?", "안녕하세요! 요즘 어떻게 지내요?", "오랜만이에요! 별일 없었어요?"]
CLOSERS = ["고마워, 오늘 얘기 즐거웠어.", "이제 자러 가야겠다.", "그럼 또 얘기하자!"]
CITIES = ["서울", "부산", "대전", "광주", "인천", "대구", "울산", "수원"]
COMPANIES = ["작은 출판사", "스타트업", "은행", "병원", "대학교", "게임 회사", "여행사"]
ROLES = ["디자이너", "개발자", "회계 담당자", "마케터", "연구원"]
EXAMS = ["정보처리기사 시험", "토익 시험", "운전면허 시험", "한국사 능력 시험", "공인중개사 시험"]
ILLNESSES = ["독감", "장염", "감기 몸살", "코로나"]
# chain -> the sessions (of 30) at which its states are stated; small talk at SMALL_TALK
CHAIN_SESSIONS = {"move": (2, 16), "job": (3, 23), "exam": (5, 11, 19), "illness": (8, 10)}
# --world unshared: every change is said in words the old state does not share (a move, a new way of working, a
# break-up, quitting smoking, a recovery), the way people say it; the guard must see the change by meaning.
UNSHARED_SESSIONS = {"home": (2, 16), "work": (3, 23), "love": (5, 19), "smoking": (8, 12), "back": (10, 26)}
DISTRICTS = ["마포구", "해운대구", "유성구", "수성구", "연수구", "남구"]
FREELANCE = ["번역가", "디자이너", "개발자", "사진작가", "작가"]
SMALL_TALK = (7, 14, 21, 27)


@dataclass(frozen=True)
class Feeling:
    """The emotion a changing fact's state carries in the world: the record an ideal model keeps for it."""

    emotion: str
    cause: str  # one per chain: every state of the chain speaks of the same cause
    status: str  # ongoing | resolved | past
    due: date | None = None  # the cause's date (an exam's), when it has one


@dataclass(frozen=True)
class Fact:
    text: str  # what the oracle's summary writes
    felt: str | None  # the reflect stage's version: with an emotion and its cause
    turn: str  # the user turn that states it
    reply: str
    kind: str  # stable | change | trivia
    chain: str | None = None
    state: int = 0
    key: str | None = None  # a word the latest state's rewrite must keep
    merged: str | None = None  # the ideal memory's line for this state, when it is not `felt` or `text`
    feeling: Feeling | None = None  # the emotion record this state makes (the fifth-session idea, issue 23)

    def texts(self) -> list[str]:
        return [self.text] + [t for t in (self.felt, self.merged) if t]


@dataclass
class User:
    name: str
    dates: list[date]
    facts: list[list[Fact]]  # per session: the facts its dialogue states
    dialogues: list[list[dict[str, str]]]

    def all_facts(self) -> list[Fact]:
        return [f for session in self.facts for f in session]


def _korean_month(day: date) -> str:
    return f"{day.year}년 {day.month}월"


def _unshared_chains(rng: random.Random, when: dict[str, list[date]]) -> dict[str, list[Fact]]:
    """Changes whose later state shares no content word with the earlier one (checked by tests)."""
    c1, c2 = rng.sample(CITIES, 2)
    v = {
        **forms(c1, "c1"),
        **forms(c2, "c2"),
        **forms(rng.choice(DISTRICTS), "d"),
        **forms(rng.choice(COMPANIES), "o"),
        **forms(rng.choice(FREELANCE), "f"),
    }
    for chain, days in when.items():
        if days:
            v[f"{chain}0"] = _korean_month(days[0])
            v[f"{chain}1"] = _korean_month(days[-1])

    def fact(chain: str, state: int, text: str, turn: str, reply: str, felt: str | None = None, **kw: str) -> Fact:
        fill = {k: x.format(**v) for k, x in kw.items()}
        return Fact(
            text.format(**v),
            felt.format(**v) if felt else None,
            turn.format(**v),
            reply,
            "change",
            chain,
            state,
            **fill,
        )

    return {
        "home": [
            fact("home", 0, "사용자는 {c1} {d}에 산다.", "나 {c1} {d}에 살아. 동네에 새 카페가 생겼어.", "좋겠네요!"),
            fact(
                "home",
                1,
                "사용자는 {home1}에 {c2_ro} 이사했다.",
                "나 {c2_ro} 이사했어. 창밖 풍경이 완전히 달라.",
                "새 출발이네요!",
                "사용자는 {home1}에 {c2_ro} 이사했는데, 창밖 풍경이 새로워서 설렌다.",
                key=c2,
            ),
        ],
        "work": [
            fact(
                "work", 0, "사용자는 {o}에 다니는 회사원이다.", "나 {o}에 다녀. 아침마다 출근 전쟁이야.", "힘들겠어요."
            ),
            fact(
                "work",
                1,
                "사용자는 {work1}부터 프리랜서 {f_ro} 활동한다.",
                "요즘 프리랜서 {f_ro} 활동해. 시간을 내 마음대로 쓸 수 있어.",
                "자유롭겠네요!",
                "사용자는 {work1}부터 프리랜서 {f_ro} 활동하는데, 시간을 마음대로 쓸 수 있어서 만족한다.",
                key="프리랜서",
            ),
        ],
        "love": [
            fact("love", 0, "사용자는 남자친구와 사귄다.", "나 남자친구랑 사귄 지 1년 됐어.", "축하해요!"),
            fact(
                "love",
                1,
                "사용자는 {love1}에 연인과 헤어졌다.",
                "나 헤어졌어. 요즘 마음이 허전해.",
                "많이 힘들겠어요.",
                "사용자는 {love1}에 연인과 헤어져서 마음이 허전하다.",
                key="헤어",
            ),
        ],
        "smoking": [
            fact("smoking", 0, "사용자는 담배를 피운다.", "나 담배 피우잖아. 하루에 반 갑 정도.", "건강 챙기세요."),
            fact(
                "smoking",
                1,
                "사용자는 {smoking1}부터 금연하고 있다.",
                "나 금연 시작했어! 벌써 2주째야.",
                "대단해요!",
                "사용자는 {smoking1}부터 금연하고 있어서 스스로를 뿌듯해한다.",
                key="금연",
            ),
        ],
        "back": [
            fact(
                "back",
                0,
                "사용자는 허리 디스크로 고생하고 있다.",
                "허리 디스크 때문에 오래 앉아 있기가 힘들어.",
                "푹 쉬세요.",
                "사용자는 허리 디스크로 고생하고 있어서 괴로워한다.",
            ),
            fact(
                "back",
                1,
                "사용자는 {back1}에 몸이 다 나았다.",
                "이제 다 나았어! 병원 안 가도 된대.",
                "다행이에요!",
                "사용자는 {back1}에 몸이 다 나아서 홀가분해한다.",
                key="나아",
                merged="사용자는 {back0}부터 허리 디스크로 고생하다가 {back1}에 다 나아서 홀가분해한다.",
            ),
        ],
    }


def _chains(rng: random.Random, when: dict[str, list[date]]) -> dict[str, list[Fact]]:
    c1, c2 = rng.sample(CITIES, 2)
    co1, co2 = rng.sample(COMPANIES, 2)
    role, exam, ill = rng.choice(ROLES), rng.choice(EXAMS), rng.choice(ILLNESSES)
    v = {
        **forms(c1, "c1"),
        **forms(c2, "c2"),
        **forms(co1, "o1"),
        **forms(co2, "o2"),
        **forms(role, "r"),
        **forms(exam, "e"),
        **forms(ill, "i"),
    }
    exam_month = _korean_month(when["exam"][1] if len(when["exam"]) > 1 else when["exam"][0])
    v.update(em=exam_month, im=_korean_month(when["illness"][0]), emshort=f"{int(exam_month.split()[1][:-1])}월")

    def fact(
        chain: str, state: int, text: str, turn: str, reply: str, felt: str | None = None, key: str | None = None
    ) -> Fact:
        return Fact(
            text.format(**v), felt.format(**v) if felt else None, turn.format(**v), reply, "change", chain, state, key
        )

    return {
        "move": [
            fact(
                "move",
                0,
                "사용자는 {c1}에 산다.",
                "나는 {c1}에 살아. 동네에 새 카페가 생겨서 자주 가.",
                "동네 카페 좋죠!",
            ),
            fact(
                "move",
                1,
                "사용자는 {c1}에서 {c2_ro} 이사해서 지금은 {c2}에 산다.",
                "나 드디어 {c1}에서 {c2_ro} 이사했어! 새집이 너무 마음에 들어.",
                "이사 축하해요!",
                "사용자는 {c1}에서 {c2_ro} 이사해서 지금은 {c2}에 사는데, 새집이 마음에 들어서 기뻐한다.",
                c2,
            ),
        ],
        "job": [
            fact(
                "job",
                0,
                "사용자는 {o1}에서 {r_ro} 일한다.",
                "나 {o1}에서 {r_ro} 일하고 있어. 요즘 야근이 많아.",
                "고생이 많네요.",
            ),
            fact(
                "job",
                1,
                "사용자는 {o1_eul} 그만두고 {o2}에 {r_ro} 새로 입사했다.",
                "나 {o1} 그만두고 {o2}에 {r_ro} 새로 들어갔어! 첫 출근이라 떨려.",
                "새 출발 축하해요!",
                "사용자는 {o1_eul} 그만두고 {o2}에 {r_ro} 새로 입사해서 설레면서도 긴장한다.",
                co2,
            ),
        ],
        "exam": [
            fact(
                "exam",
                0,
                "사용자는 {em}에 {e_eul} 볼 예정이다.",
                "나 {emshort}에 {e} 보기로 했어. 벌써 긴장돼.",
                "잘 볼 거예요!",
                "사용자는 {em}에 {e_eul} 볼 예정이라 긴장하고 있다.",
            ),
            fact(
                "exam",
                1,
                "사용자는 {e_eul} 치르고 결과를 기다리고 있다.",
                "드디어 {e} 봤어. 이제 결과만 기다리는 중이야.",
                "수고 많았어요!",
                "사용자는 {e_eul} 치르고 결과를 기다리며 초조해한다.",
            ),
            fact(
                "exam",
                2,
                "사용자는 {em}에 {e_eul} 치르고 합격했다.",
                "{e} 합격했어!! 너무 기뻐.",
                "축하해요!",
                "사용자는 {em}에 {e_eul} 치르고 합격해서 무척 기뻐한다.",
                "합격",
            ),
        ],
        "illness": [
            fact(
                "illness",
                0,
                "사용자는 {i}에 걸려서 몸이 안 좋다.",
                "나 {i}에 걸려서 며칠째 누워 있어.",
                "푹 쉬세요.",
                "사용자는 {i}에 걸려서 몸이 안 좋아 힘들어한다.",
            ),
            fact(
                "illness",
                1,
                "사용자는 {im}에 {i}에 걸렸다가 나았다.",
                "이제 {i} 다 나았어. 살 것 같아.",
                "다행이에요!",
                "사용자는 {im}에 {i}에 걸렸다가 나아서 안도한다.",
                "나았",
            ),
        ],
    }


def _with_feelings(chains: dict[str, list[Fact]], when: dict[str, list[date]]) -> dict[str, list[Fact]]:
    """The chains with the emotion each state carries: an exam (nervous before it, dated the day it is taken;
    anxious for the result; resolved when passed), an illness (ongoing, then resolved when recovered), a new job's
    first days (ongoing), a back problem (ongoing, then resolved)."""
    out = dict(chains)

    def cause(chain: str) -> str:
        first = chains[chain][0].text
        return {
            "exam": re.sub(r"^사용자는 .*?에 (.+?)[을를] 볼 예정이다\.$", r"\1", first),
            "illness": re.sub(r"^사용자는 (.+?)에 걸려서.*$", r"\1", first),
            "back": "허리 디스크",
        }.get(chain, chain)

    plan: dict[str, list[tuple[str, str, bool]]] = {
        "exam": [("긴장", "ongoing", True), ("초조", "ongoing", False), ("기쁨", "resolved", False)],
        "illness": [("힘듦", "ongoing", False), ("안도", "resolved", False)],
        "back": [("괴로움", "ongoing", False), ("홀가분함", "resolved", False)],
    }
    for chain, states in plan.items():
        if chain not in chains:
            continue
        days = when.get(chain, [])
        due = days[1] if len(days) > 1 else None
        out[chain] = [
            replace(f, feeling=Feeling(e, cause(chain), st, due if dated else None)) if i < len(states) else f
            for i, (f, (e, st, dated)) in enumerate(zip(chains[chain], states))
        ] + chains[chain][len(states) :]
    if "job" in chains and len(chains["job"]) > 1:
        first_day = chains["job"][1]
        company = re.sub(r"^사용자는 .+?[을를] 그만두고 (.+?)에 .*$", r"\1", first_day.text)
        out["job"] = [chains["job"][0], replace(first_day, feeling=Feeling("긴장", f"{company} 첫 출근", "ongoing"))]
    return out


def make_user(index: int, sessions: int, seed: int, world: str = "classic") -> User:
    """One simulated user: seeded values, stable facts introduced 1-2 per session, changes at set sessions."""
    rng = random.Random(seed * 7919 + index)
    dates = [date(2024, 1, 8) + timedelta(days=rng.randrange(7))]
    while len(dates) < sessions:
        dates.append(dates[-1] + timedelta(days=rng.randint(5, 12)))

    def at(s: int) -> int:  # a session of 30, scaled to `sessions`
        return max(1, round(s * sessions / 30))

    schedule: dict[str, list[int]] = {}
    for chain, places in (UNSHARED_SESSIONS if world == "unshared" else CHAIN_SESSIONS).items():
        out: list[int] = []
        for s in places:
            s = max(at(s), out[-1] + 1 if out else 1)
            if s <= sessions:
                out.append(s)
        schedule[chain] = out
    make_chains = _unshared_chains if world == "unshared" else _chains
    chains = _with_feelings(
        make_chains(rng, {c: [dates[s - 1] for s in ss] for c, ss in schedule.items()}),
        {c: [dates[s - 1] for s in ss] for c, ss in schedule.items()},
    )
    pool = [
        Fact(t.format(**forms(x)), f.format(**forms(x)) if f else None, u.format(**forms(x)), r, "stable")
        for values, t, u, r, f in STABLE
        for x in [rng.choice(values)]
    ]
    pool += [Fact(t, None, u, "그렇군요.", "stable") for t, u in rng.sample(TRAITS, 3)]
    rng.shuffle(pool)
    trivia = rng.sample(TRIVIA, len(TRIVIA))
    small = {at(s) for s in SMALL_TALK}
    facts: list[list[Fact]] = []
    dialogues: list[list[dict[str, str]]] = []
    for s in range(1, sessions + 1):
        day = dates[s - 1]
        today = [chains[c][i] for c, ss in schedule.items() for i, x in enumerate(ss) if x == s]
        if not any(f.state for f in today) and not (s in small and not today):
            for _ in range(1 if today else rng.choice([1, 1, 2])):
                if pool:
                    today.append(pool.pop())
        if not today and trivia:
            turn, text = trivia.pop()
            today.append(
                Fact(text.format(day=f"{day.year}년 {day.month}월 {day.day}일"), None, turn, "그랬군요.", "trivia")
            )
        dialogue = [{"role": "assistant", "text": rng.choice(OPENERS)}]
        for f in today:
            dialogue += [{"role": "user", "text": f.turn}, {"role": "assistant", "text": f.reply}]
        dialogue += [
            {"role": "user", "text": rng.choice(CLOSERS)},
            {"role": "assistant", "text": "다음에 또 얘기해요!"},
        ]
        facts.append(today)
        dialogues.append(dialogue)
    return User(f"user{index + 1}", dates, facts, dialogues)


# -- the oracle: the ideal model, reading each stage's prompt -----------------------------------------------
class Oracle:
    """Answers every update stage as a model that knows this user's world would."""

    def __init__(self, user: User):
        facts = user.all_facts()
        self.by_turn = {f.turn: f for f in facts}
        self.by_text = {t: f for f in facts for t in f.texts()}

    def _stated(self, lines: list[str]) -> list[Fact]:
        turns = [line[len("사용자: ") :] for line in lines if line.startswith("사용자: ")]
        return [self.by_turn[t] for t in turns if t in self.by_turn]

    def __call__(self, messages: list[Message]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage == "summarize":
            return "\n".join(f.text for f in self._stated(section(prompt, "\n대화 (", "요약:")))
        if stage == "reflect":
            lines = section(prompt, "\n요약:", "답:")
            return "\n".join((f.felt or line) if (f := self.by_text.get(line)) else line for line in lines)
        if stage == "update":
            previous, summary = (
                section(prompt, "\n이전 기억:", "이번 요약:"),
                section(prompt, "\n이번 요약:", "새 기억:"),
            )
            lines = self._update(previous, summary)
            if "바뀐 문장:" not in prompt:  # a prompt that asks for no claims gets none
                return "\n".join(lines)
            claims = [
                f"{line} => {new}" for line in previous if line not in lines and (new := self._later(line, summary))
            ]
            return "\n".join([*lines, "바뀐 문장:", *claims] if claims else [*lines, "바뀐 문장: 없음"])
        if stage == "verify":
            clash = self.contradiction(section(prompt, "\n새 기억:", "답:"))
            return f"실패: '{clash[0]}'와 '{clash[1]}'는 서로 모순됩니다." if clash else "통과"
        if stage in ("guard", "guard_both"):  # "N. A: <old> / B: <new>": does B end A? (guard_both: can both hold?)
            answers = []
            for n, line in enumerate(section(prompt, "\n질문:", "답:"), 1):
                old, _, new = line.partition(". A: ")[2].partition(" / B: ")
                a, b = self.by_text.get(old), self.by_text.get(new) or self.by_turn.get(new)
                ends = a is not None and b is not None and a.chain is not None and a.chain == b.chain
                ended = ends and b.state > a.state  # type: ignore[union-attr]
                answers.append(f"{n}: {'예' if ended != (stage == 'guard_both') else '아니오'}")
            return "\n".join(answers)
        if stage == "scope":  # a large memory: the numbered sentences the summary changes
            memory = [re.sub(r"^\d+\.\s*", "", line) for line in section(prompt, "\n기억:", "이번 요약:")]
            summary = section(prompt, "\n이번 요약:", "답:")
            named = [str(n) for n, line in enumerate(memory, 1) if self._later(line, summary)]
            return f"번호: {', '.join(named) or '없음'}"
        if stage == "emotions":
            return self._records(prompt)
        if stage == "operations":
            return self._operation(section(prompt, "\n기억:", "새 문장:"), section(prompt, "\n새 문장:", "답:")[0])
        return ""

    def _records(self, prompt: str) -> str:
        """The emotion records step: each stated fact's feeling, on the record of its cause when one is shown."""
        shown = [
            line.split("|") for line in section(prompt, "\n지금까지의 기록:", "\n새 기억:") if line.startswith("R")
        ]
        refs = {fields[2].strip(): fields[0].strip() for fields in shown if len(fields) >= 5}
        memory = [re.sub(r"^\d+\.\s*", "", line) for line in section(prompt, "\n새 기억:", "\n이번 대화:")]
        lines = []
        for f in self._stated(section(prompt, "\n이번 대화:", "답:")):
            if f.feeling is None:
                continue
            e = f.feeling
            number = next((str(i) for i, m in enumerate(memory, 1) if m in f.texts()), "-")
            status = {"ongoing": "진행 중", "resolved": "해소", "past": "지난 일"}[e.status]
            due = e.due.isoformat() if e.due else "-"
            lines.append(
                f"{refs.get(e.cause, '새')} | {e.emotion} | {e.cause} | {status} | {due} | {number} | {f.turn}"
            )
        return "\n".join(lines) or "없음"

    def contradiction(self, memory: list[str]) -> tuple[str, str] | None:
        """Two stored states of one changing fact (an earlier one still in its present-tense words), or None."""
        for a in memory:
            for b in memory:
                fa, fb = self.by_text.get(a), self.by_text.get(b)
                if fa and fb and fa.chain and fa.chain == fb.chain and fa.state < fb.state:
                    return a, b
        return None

    def nli(self, premise: str, hypothesis: str) -> str:
        """The NLI judge of `keem eval memory`, answered from the world: contradiction for two states of one fact."""
        return "contradiction" if self.contradiction([premise, hypothesis]) else "neutral"

    def _later(self, line: str, summary: list[str]) -> str | None:
        """What the ideal rewrite wrote for `line` when the summary holds a later state of its fact (the claim's B)."""
        old = self.by_text.get(line)
        for text in summary:
            new = self.by_text.get(text)
            if old is not None and new is not None and old.chain and new.chain == old.chain and new.state > old.state:
                return new.merged or text
        return None

    def _update(self, previous: list[str], summary: list[str]) -> list[str]:
        later = {f.chain: (f.state, line) for line in summary if (f := self.by_text.get(line)) and f.chain}
        out: list[str] = []
        used: set[str] = set()
        for line in previous:
            f = self.by_text.get(line)
            if f is not None and f.chain in later and later[f.chain][0] > f.state:
                new = self.by_text[later[f.chain][1]]
                used.add(later[f.chain][1])
                line = new.merged or later[f.chain][1]
            if line not in out:
                out.append(line)
        return out + [line for line in summary if line not in out and line not in used]

    def _operation(self, numbered: list[str], sentence: str) -> str:
        memory = [re.sub(r"^\d+\.\s*", "", line) for line in numbered]
        new = self.by_text.get(sentence)
        if sentence in memory or (new is not None and any(t in memory for t in new.texts())):
            return "PASS"
        for n, line in enumerate(memory, 1):
            old = self.by_text.get(line)
            if new is not None and new.chain and old is not None and old.chain == new.chain and old.state < new.state:
                return f"REPLACE {n}"
        return "APPEND"


# -- metering and scoring -----------------------------------------------------------------------------------
class Metered(ChatModel):
    """Any chat model, with each call's (prompt tokens, completion tokens, finish reason) recorded."""

    def __init__(self, inner: ChatModel):
        self.inner, self.spec, self.context_window = inner, inner.spec, inner.context_window
        self.calls: list[tuple[int, int, str]] = []

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        return self.inner.stream(messages, options)

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        prompt = sum(self.count_tokens(m["content"]) for m in messages)
        try:
            answer = self.inner.complete(messages, options)
        except Exception:
            self.calls.append((prompt, 0, "error"))
            raise
        self.calls.append(
            (
                answer.finish.prompt_tokens or prompt,
                answer.finish.completion_tokens or self.count_tokens(answer.text),
                answer.finish.reason,
            )
        )
        return answer


def present(fact: Fact, memory: list[str]) -> bool:
    """The fact's sentence, a sentence containing it, or one holding >= 60% of its content words."""
    stem = fact.text.rstrip(".")
    if any(stem in m for m in memory):
        return True
    words = content_words(fact.text)
    return bool(words) and any(len(words & content_words(m)) / len(words) >= CONTAINMENT for m in memory)


QUOTE = re.compile(r'^사용자는 ".*"라고 말했다\.$')
ENGLISH = re.compile(r"[A-Za-z]{2,}(?:\W+[A-Za-z]{2,}){2,}")


def junk_kind(text: str, possible: set[str]) -> str | None:
    """None for an oracle sentence or a rewrite containing one; else quote (the never-lose fallback's user words),
    wrapper (<think>, a fence, an English phrase of 3+ words, a preamble), cut (not ending in 다/요, with or
    without a period), or other (a well-formed sentence the oracle never wrote)."""
    if text in possible or any(p.rstrip(".") in text for p in possible):
        return None
    if QUOTE.match(text):
        return "quote"
    if "<think>" in text or "</think>" in text or "```" in text or ENGLISH.search(text) or "요청하신" in text:
        return "wrapper"
    if not text.rstrip(" \"'”").endswith(("다.", "다", "요.", "요")):
        return "cut"
    return "other"


def world_status(user: User, said: int) -> dict[str, str]:
    """Each emotion cause the first `said` sessions spoke of, with its status in the world after them."""
    status: dict[str, str] = {}
    for session in user.facts[:said]:
        for f in session:
            if f.feeling is not None:
                status[f.feeling.cause] = f.feeling.status
    return status


def world_due(user: User, said: int, day: date) -> set[str]:
    """The causes a friend should ask about at a session on `day` after `said` sessions: ongoing in the world and
    past their date (the date an earlier state gave, if any)."""
    dates: dict[str, date] = {}
    for session in user.facts[:said]:
        for f in session:
            if f.feeling is not None and f.feeling.due is not None:
                dates[f.feeling.cause] = f.feeling.due
    return {
        c
        for c, status in world_status(user, said).items()
        if status == "ongoing" and (c not in dates or dates[c] < day)
    }


def world_cause(record: EmotionRecord, user: User) -> str | None:
    """The world's cause a record is about: the same words, one inside the other, or half its content words."""
    causes = {f.feeling.cause for f in user.all_facts() if f.feeling is not None}
    for cause in causes:
        if cause in record.cause or record.cause in cause:
            return cause
    for cause in causes:
        words = content_words(cause)
        if words and len(words & content_words(record.cause)) / len(words) >= 0.5:
            return cause
    return None


def run_user(
    strategy: str, user: User, model: Metered, embedder: Embedder | None, ceiling: int, vectors: dict[str, np.ndarray]
) -> dict[str, Any]:
    memory: list[Sentence] = []
    previous_date: date | None = None
    updates: list[dict[str, Any]] = []
    records: list[EmotionRecord] = []
    ids = iter(range(1, 10**9))  # sentence ids, as the store gives them: records follow sentences by them
    emotions = Counter[str]()
    last_asked: str | None = None
    was_due: set[str] = set()
    asked_while_due: set[str] = set()
    for k, (day, dialogue, stated) in enumerate(zip(user.dates, user.dialogues, user.facts)):
        if k:  # the opening of this session: what the records make due, against what the world makes due
            due, chosen = world_due(user, k, day), choose(records, day, last_asked)
            emotions["due_sessions"] += bool(due)
            was_due |= due
            if chosen is not None:
                emotions["openings"] += 1
                cause = world_cause(chosen, user)
                emotions["asked_due" if cause in due else "asked_not_due"] += 1
                if cause in due:
                    asked_while_due.add(cause)  # type: ignore[arg-type]
            last_asked = chosen.key if chosen else None
        updater = make_updater(strategy, model, embedder, ceiling)  # one per job, as the app's job runner makes
        previous_texts = [x.text for x in memory]
        first, started = len(model.calls), time.perf_counter()
        result, error = None, None
        try:
            inp = UpdateInput(memory, dialogue, day, previous_date, records=records, session_id=k + 1)
            result = updater.update(inp, lambda stage: None)
        except GenerationError as exc:  # the job fails; the app keeps the previous version
            error = str(exc)
        ms = (time.perf_counter() - started) * 1000
        if result is not None:  # committed with each sentence's vector, as memory/engine.py stores them
            todo = [x.text for x in result.sentences if x.text not in vectors]
            if embedder is not None and todo:
                vectors.update(zip(todo, embedder.embed(todo)))
            memory = [
                replace(x, embedding=vectors.get(x.text), embedder=embedder.name if embedder else None, id=next(ids))
                for x in result.sentences
            ]
            records = link(result.records if result.records is not None else records, memory)
        for cause, status in world_status(user, k + 1).items():  # is each record current after this session?
            mine = [r for r in records if world_cause(r, user) == cause]
            emotions["events"] += 1
            emotions["current"] += bool(mine) and max(mine, key=lambda r: r.first_seen).status == status
        now = [x.text for x in memory]
        calls = model.calls[first:]
        details = result.details if result is not None else {}
        scoped = "scope" in details or (
            strategy == "operations"
            and bool(previous_texts)
            and any(  # shown in part
                updater.new_steps().rewrite_budget(previous_texts + [s]) > ceiling  # type: ignore[attr-defined]
                for s in details.get("summary", [])
            )
        )
        last = (details.get("attempts") or [{}])[-1]
        updates.append(
            {
                "calls": len(calls),
                "in": sum(c[0] for c in calls),
                "out": sum(c[1] for c in calls),
                "cut": sum(c[2] == "length" for c in calls),
                "ms": ms,
                "error": error is not None,
                "scoped": scoped,
                "fallback": result is not None and result.status == "fallback",
                "restored": sum(d["action"] == "restored" for d in last.get("guard", [])),
                "size": len(memory),
                "unstored": sum(not present(f, now) for f in stated),
            }
        )
        previous_date = day
    texts = [s.text for s in memory]
    introduced = [f for f in user.all_facts() if f.kind == "stable"]
    changed, missed, stale_count = 0, [], 0
    for chain in sorted({f.chain for f in user.all_facts() if f.chain}):
        states = [f for f in user.all_facts() if f.chain == chain]
        if len(states) < 2:
            continue
        changed += 1
        latest = states[-1]
        stale = any(t in texts for f in states[:-1] for t in f.texts())
        stale_count += stale
        found = present(latest, texts) or bool(latest.key and any(latest.key in t for t in texts))
        if stale or not found:
            why = "superseded state still stored" if stale else "latest state missing"
            missed.append(f"{user.name} {chain}: {why}")
    possible = {t for f in user.all_facts() for t in f.texts()}
    kinds = [junk_kind(t, possible) for t in texts]
    return {
        "updates": updates,
        "stated": sum(map(len, user.facts)),
        "stable": len(introduced),
        "kept": sum(present(f, texts) for f in introduced),
        "lost": [f.text for f in introduced if not present(f, texts)],
        "changed": changed,
        "current": changed - len(missed),
        "stale": stale_count,
        "conflicts": conflicts(texts, Oracle(user).nli, max_pairs=None).contradiction,
        "missed": missed,
        "junk": {k: kinds.count(k) for k in ("wrapper", "cut", "quote", "other")},
        "junk_examples": [t for t, k in zip(texts, kinds) if k in ("wrapper", "cut")][:5],
        "dropped": len(getattr(model.inner, "dropped", [])),
        "emotions": {
            **emotions,
            "records": len(records),
            "due_events": len(was_due),
            "due_events_asked": len(asked_while_due),
            "causes_ok": sum(world_cause(r, user) is not None for r in records),
        },
    }


def summarize_runs(runs: list[dict[str, Any]], sessions: int) -> dict[str, Any]:
    ups = [u for r in runs for u in r["updates"]]
    early = [u for r in runs for u in r["updates"][:10]]
    late = [u for r in runs for u in r["updates"][-10:]]
    marks = sorted({m for m in (1, 10, 20, 30) if m <= sessions} | {sessions})
    mean = statistics.mean
    return {
        "stable_kept_pct": 100 * sum(r["kept"] for r in runs) / max(1, sum(r["stable"] for r in runs)),
        "changed_current_pct": 100 * sum(r["current"] for r in runs) / max(1, sum(r["changed"] for r in runs)),
        "stale": sum(r["stale"] for r in runs),
        "stable_lost": sum(r["stable"] - r["kept"] for r in runs),
        "conflicts_per_memory": mean(r["conflicts"] for r in runs),
        "stable_introduced": sum(r["stable"] for r in runs),
        "changes": sum(r["changed"] for r in runs),
        "junk": {k: sum(r["junk"][k] for r in runs) for k in ("wrapper", "cut", "quote", "other")},
        "size_at": {m: mean(r["updates"][m - 1]["size"] for r in runs) for m in marks},
        "sizes": [round(mean(r["updates"][i]["size"] for r in runs), 1) for i in range(sessions)],
        "calls_per_update": mean(u["calls"] for u in ups),
        "in_tokens": (mean(u["in"] for u in early), mean(u["in"] for u in late)),
        "out_tokens": (mean(u["out"] for u in early), mean(u["out"] for u in late)),
        "unstored": sum(u["unstored"] for u in ups),
        "stated": sum(r["stated"] for r in runs),
        "cut_answers": sum(u["cut"] for u in ups),
        "scoped": sum(u["scoped"] for u in ups),
        "fallback": sum(u["fallback"] for u in ups),
        "failed": sum(u["error"] for u in ups),
        "dropped_by_model": sum(r["dropped"] for r in runs),
        "restored_by_guard": sum(u["restored"] for u in ups),
        "update_ms": mean(u["ms"] for u in ups),
        "updates": len(ups),
        "lost": [t for r in runs for t in r["lost"]],
        "missed": [t for r in runs for t in r["missed"]],
        "junk_examples": [t for r in runs for t in r["junk_examples"]],
        "emotions": {k: sum(r["emotions"].get(k, 0) for r in runs) for k in EMOTION_COUNTS},
    }


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--ceiling", type=int, default=512, help="max_new_tokens of one update call (make_updater)")
    parser.add_argument("--embedder", default="ngram", help="ngram (fast, default here) or auto (the app's, slower)")
    parser.add_argument("--habit-rate", type=float, default=0.3, help="rate of each wrapping habit of the fake")
    parser.add_argument("--drop-rate", type=float, default=0.3, help="rate of silently dropping a memory line")
    parser.add_argument("--stale-rate", type=float, default=0.3, help="rate of keeping a line the update replaced")
    parser.add_argument("--yes-rate", type=float, default=0.0, help="rate of answering 예 to every yes/no question")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="rate of calls raising GenerationError")
    parser.add_argument("--world", default="classic", choices=WORLDS, help="unshared: changes said in new words")
    parser.add_argument("--model", default=None, help="a real model spec (openai:..., hf:...) instead of the fake")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    embedder = load_embedder(args.embedder)
    users = [make_user(i, args.sessions, args.seed, args.world) for i in range(args.users)]
    habits = {
        **{h: args.habit_rate for h in WRAPPING},
        "drop": args.drop_rate,
        "stale": args.stale_rate,
        "yes": args.yes_rate,
        "fail": args.fail_rate,
    }
    real = load_chat_model(args.model) if args.model else None
    results: dict[str, dict[str, Any]] = {}
    vectors: dict[str, np.ndarray] = {}  # text -> its stored vector, shared by every run (the engine's job)
    content_words("사용자는 고양이를 키운다.")  # load Kiwi before any update is timed
    for strategy in args.strategies:
        content_words.cache_clear()  # each strategy tokenizes its own sentences, none inherits the cache
        runs = []
        for u, user in enumerate(users):
            inner = real or RealisticChatModel(Oracle(user), habits, seed=args.seed * 1000 + u)
            runs.append(run_user(strategy, user, Metered(inner), embedder, args.ceiling, vectors))
        results[strategy] = summarize_runs(runs, args.sessions)
    wall = time.perf_counter() - started
    if args.json:
        print(json.dumps({"args": vars(args), "wall_s": wall, "results": results}, ensure_ascii=False, indent=2))
        return
    model = args.model or (
        f"realistic fake (habits {args.habit_rate}, drop {args.drop_rate}, stale {args.stale_rate}, "
        f"yes {args.yes_rate}, fail {args.fail_rate})"
    )
    print(
        f"world {args.world}, {args.users} users x {args.sessions} sessions, model {model}, ceiling {args.ceiling}, "
        f"embedder {embedder.name}, seed {args.seed}; {wall:.1f} s"
    )
    names = list(results)
    rows: list[tuple[str, Any]] = [
        ("stable facts kept %", lambda r: f"{r['stable_kept_pct']:.1f}"),
        ("changed facts current %", lambda r: f"{r['changed_current_pct']:.1f}"),
        ("outdated facts still stored", lambda r: f"{r['stale']}/{r['changes']}"),
        ("unrelated facts lost", lambda r: f"{r['stable_lost']}/{r['stable_introduced']}"),
        ("NLI conflicts per memory", lambda r: f"{r['conflicts_per_memory']:.2f}"),
        ("session's facts not stored by it", lambda r: f"{r['unstored']}/{r['stated']}"),
        ("stored cut/wrapper text", lambda r: f"{r['junk']['cut'] + r['junk']['wrapper']}"),
        ("stored user quotes (fallback)", lambda r: f"{r['junk']['quote']}"),
        ("stored other non-oracle", lambda r: f"{r['junk']['other']}"),
        *[
            (f"memory size @ session {m}", partial(lambda m, r: f"{r['size_at'][m]:.1f}", m))
            for m in next(iter(results.values()))["size_at"]
        ],
        ("model calls / update", lambda r: f"{r['calls_per_update']:.2f}"),
        ("input tokens / update, first 10", lambda r: f"{r['in_tokens'][0]:.0f}"),
        ("input tokens / update, last 10", lambda r: f"{r['in_tokens'][1]:.0f}"),
        ("output tokens / update, first 10", lambda r: f"{r['out_tokens'][0]:.0f}"),
        ("output tokens / update, last 10", lambda r: f"{r['out_tokens'][1]:.0f}"),
        ("answers cut at budget", lambda r: f"{r['cut_answers']}"),
        ("scoped updates", lambda r: f"{r['scoped']}/{r['updates']}"),
        ("fallback updates", lambda r: f"{r['fallback']}/{r['updates']}"),
        ("failed updates (kept previous)", lambda r: f"{r['failed']}/{r['updates']}"),
        ("lines dropped by model", lambda r: f"{r['dropped_by_model']}"),
        ("sentences restored by guard", lambda r: f"{r['restored_by_guard']}"),
        ("update wall time, mean ms", lambda r: f"{r['update_ms']:.1f}"),
        (
            "due events the opening asked about",
            lambda r: _share(r["emotions"]["due_events_asked"], r["emotions"]["due_events"]),
        ),
        (
            "sessions with something due, asked",
            lambda r: _share(r["emotions"]["asked_due"], r["emotions"]["due_sessions"]),
        ),
        ("openings about resolved/not due", lambda r: f"{r['emotions']['asked_not_due']}"),
        ("emotion records current", lambda r: _share(r["emotions"]["current"], r["emotions"]["events"])),
        ("emotion record causes correct", lambda r: _share(r["emotions"]["causes_ok"], r["emotions"]["records"])),
    ]
    print(f"{'':<34}" + "".join(f"{n:>12}" for n in names))
    for label, cell in rows:
        print(f"{label:<34}" + "".join(f"{cell(results[n]):>12}" for n in names))
    first = next(iter(results.values()))
    print(
        f"({first['stable_introduced']} stable facts introduced, {first['changes']} changed facts, "
        f"over {args.users} users)"
    )
    for name, r in results.items():
        print(f"{name} memory size per session: {' '.join(f'{s:g}' for s in r['sizes'])}")
        if r["lost"]:
            print(f"  {name} lost: {'; '.join(r['lost'][:4])}{' ...' if len(r['lost']) > 4 else ''}")
        if r["missed"]:
            print(f"  {name} changes not current: {'; '.join(r['missed'][:4])}{' ...' if len(r['missed']) > 4 else ''}")
        if r["junk_examples"]:
            print(f"  {name} cut/wrapper stored: {'; '.join(r['junk_examples'][:3])}")


if __name__ == "__main__":
    main()
