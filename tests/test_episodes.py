"""The corpus readers on the bundled fixtures, their format detection, and their errors on malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.corpora.episodes import detect_format, normalize_date, read_episodes
from models.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "evaluation" / "fixtures"


@pytest.mark.parametrize(
    "name, fmt", [("kmsc", "kmsc"), ("carecall.json", "carecall"), ("msc.jsonl", "msc"), ("locomo.json", "locomo")]
)
def test_detects_each_fixture(name: str, fmt: str) -> None:
    assert detect_format(FIXTURES / name) == fmt
    episodes = read_episodes(FIXTURES / name)
    assert len(episodes) == 2
    assert all(ep.source == fmt and 3 <= len(ep.sessions) <= 4 for ep in episodes)
    assert all(t.role in ("user", "assistant") and t.text for ep in episodes for s in ep.sessions for t in s.turns)


def test_kmsc_fields() -> None:
    a, b = read_episodes(FIXTURES / "kmsc", "kmsc")
    assert a.id == "K2-00001-CC-S3" and [s.id for s in a.sessions] == ["00001-1", "00001-2", "00001-3"]
    s1 = a.sessions[0]
    assert s1.date == "2024-03-01" and s1.turns[0].role == "user" and s1.turns[1].role == "assistant"
    assert s1.turns[0].time == "10:00:00"
    assert s1.summary == [
        "사용자는 테니스를 배우기 시작했다.",
        "사용자는 일주일에 두 번 테니스를 친다.",
        "사용자는 손목이 시큰거린다.",
    ]
    assert len(b.sessions) == 4 and b.sessions[3].date == "2024-07-15"
    other = read_episodes(FIXTURES / "kmsc", user_speaker="speaker2")[0].sessions[0]
    assert other.turns[0].role == "assistant" and other.summary == ["사용자는 운동을 좋아한다."]


def test_kmsc_variants(tmp_path: Path) -> None:
    """A wrapped list, other key spellings, a summary as one string keyed per speaker, and a missing summary."""
    record = {
        "multisessionID": "x9",
        "Sessions": [
            {
                "Dialogue": [
                    {"Speaker": "speaker1", "Text": "나 이사했어.", "Date": "2024.01.02"},
                    {"Speaker": "speaker2", "Text": "축하해!"},
                ],
                "sessionSummary": {"speaker1": "나는 이사했다. 나는 기쁘다."},
            },
            {
                "dialog": [{"speaker": "speaker1", "utterance": "집들이 했어."}],
                "sessionPersonaSummary": {"speaker1": []},
            },
        ],
    }
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"data": [record]}, ensure_ascii=False), encoding="utf-8")
    (ep,) = read_episodes(path, "kmsc")
    assert ep.id == "x9" and ep.sessions[0].date == "2024-01-02"
    assert ep.sessions[0].summary == ["사용자는 이사했다.", "사용자는 기쁘다."]
    assert ep.sessions[1].summary is None and ep.sessions[1].id == "x9-2"


def test_carecall_fields() -> None:
    first, second = read_episodes(FIXTURES / "carecall.json")
    assert first.id == "cc001" and second.id == "cc002"
    s = first.sessions[1]
    assert s.id == "cc001-2" and s.date == "2024-01-17" and s.turns[0].role == "assistant"
    assert s.turns[1].role == "user" and s.summary[0].startswith("사용자는 무릎 주사를")


def test_carecall_memory_is_the_memory_before_each_session() -> None:
    """The public CareCall sample's shape: `memory` is what the bot knew before the session (session 1's is empty)."""
    first, second, third = read_episodes(FIXTURES / "carecall_memory_sample.json")
    assert [first.id, second.id, third.id] == ["interactive-1", "interactive-2", "interactive-3"]
    assert [s.id for s in first.sessions] == [f"interactive-1-S{n}" for n in range(1, 5)]
    s1, s2, s3, s4 = first.sessions
    assert s1.memory_before == [] and s1.memory_after == s2.memory_before == [
        "허리가 아파 한의원에 다니심",
        "입맛이 없어 죽을 드심",
    ]
    assert s3.memory_after == s4.memory_before and s4.memory_after is None  # nothing after the last session
    assert s1.turns[0].role == "assistant" and s1.turns[1].role == "user"  # "system" is CareCall's bot
    assert s1.summary == ["허리가 아파 한의원에 다니심", "입맛이 없어 죽을 드심"] and s1.date is None
    assert first.probe is None and s1.updated is None and second.sessions[-1].memory_after is None


def test_carecall_probe_session_holds_the_memory_after_the_last_session() -> None:
    first, second = read_episodes(FIXTURES / "carecall_eval.json")
    assert first.id == "cc001" and second.id == "cc002" and len(first.sessions) == 4
    assert first.probe is not None and first.probe.id == "cc001_5"
    assert first.sessions[-1].memory_after == first.probe.memory_before
    assert "사용자의 강아지 초코가 장염에 걸렸다." in first.sessions[-1].memory_after
    marked = [t for t in first.probe.dialogue() if t.get("probe")]
    assert len(marked) == 3 and all(t["role"] == "assistant" for t in marked)
    assert [s.updated for s in first.sessions] == [None, True, True, True]


def test_carecall_variants_wrapper_probe_object_and_guid_ids(tmp_path: Path) -> None:
    def session(guid: str, memory: list[str] | None, probe: bool = False) -> dict:
        turn = {"role": "system", "text": "안녕하세요", **({"probe": True} if probe else {})}
        return {
            "guid": guid,
            "dialogue": [turn, {"role": "사용자", "text": "네"}],
            **({"memory": memory} if memory is not None else {}),
        }

    data = {
        "episodes": [
            {"id": "given", "sessions": [session("a_1", []), session("a_2", ["x"])], "probe": session("a_5", ["y"])},
            [session("cc009_1", []), session("cc009_2", None)],
            [session("left", []), session("right", [])],
        ]
    }
    path = tmp_path / "variants.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert detect_format(path) == "carecall"
    given, unnamed, mixed = read_episodes(path)
    assert given.id == "given" and given.probe is not None and given.sessions[-1].memory_after == ["y"]
    assert given.sessions[1].turns[1].role == "user"
    assert unnamed.id == "cc009" and unnamed.sessions[0].memory_after is None  # session 2 gives no 'memory'
    assert mixed.id == "episode-2"


def test_msc_fields() -> None:
    first, second = read_episodes(FIXTURES / "msc.jsonl")
    assert first.id == "train:ordered_101" and len(first.sessions) == 3 and len(second.sessions) == 4
    assert first.sessions[0].turns[0].text == "I just adopted a puppy named Max."
    assert [t.role for t in first.sessions[0].turns] == ["user", "assistant", "user"]
    assert first.sessions[2].summary == ["I am moving to Boston for work.", "My dog Max hates car rides."]
    assert first.sessions[0].date is None


def test_locomo_fields() -> None:
    first, second = read_episodes(FIXTURES / "locomo.json")
    assert first.id == "conv-1" and [s.date for s in first.sessions] == ["2023-05-08", "2023-05-25", "2023-06-09"]
    assert first.sessions[0].summary == ["Caroline started a pottery class.", "Caroline loves pottery."]
    assert first.sessions[0].turns[0].role == "user" and first.sessions[0].turns[1].role == "assistant"
    assert second.sessions[0].summary == ["Jon lost his job at the bank.", "He wants to open a dance studio."]
    assert second.sessions[2].summary is None  # the builder summarizes it


def test_normalize_date() -> None:
    assert normalize_date("20240301") == "2024-03-01"
    assert normalize_date("1:56 pm on 8 May, 2023") == "2023-05-08"
    assert normalize_date("어제쯤") == "어제쯤" and normalize_date("") is None


@pytest.mark.parametrize(
    "text, fmt, expected",
    [
        ("[1, 2]", None, "pass --format"),
        ('{"a": ', "carecall", "line 1"),
        ('[[{"guid": "g-1", "dialogue": []}, {"guid": "g-2"}]]', "carecall", "episode 0, session 2"),
        ('[[{"guid": "g-1", "dialogue": [{"role": "user"}]}]]', "carecall", "episode 0, session 1, turn 1"),
        (
            '[[{"guid": "g-1", "dialogue": [{"role": "robot", "text": "hi"}]}]]',
            "carecall",
            "unknown role 'robot'.*'system'",
        ),
        ('[[{"guid": "g-1", "dialogue": [], "memory": [1]}]]', "carecall", "'memory' is not a list of sentences"),
        ('{"dialog": [{"text": "hi"}]}\nnot json\n', "msc", "line 2"),
        ('[{"sample_id": "s", "conversation": {"speaker_a": "A"}}]', "locomo", "session_1"),
        ('{"FileInfo": {}, "sessionInfo": [{"dialog": [{"speaker": "speaker1"}]}]}', "kmsc", "turn 1"),
        ('{"x": 1}', "kmsc", "sessionInfo"),
    ],
)
def test_malformed_input_says_where_and_how(tmp_path: Path, text: str, fmt: str | None, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=expected):
        read_episodes(path, fmt)


def test_unknown_format_missing_file_and_duplicate_ids(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown format 'foo'"):
        read_episodes(FIXTURES / "carecall.json", "foo")
    with pytest.raises(InputError, match="no such file"):
        read_episodes(tmp_path / "missing.json")
    episode = [{"guid": "same-1", "dialogue": [{"role": "user", "text": "안녕"}], "summary": ["사용자는 인사했다."]}]
    path = tmp_path / "dupes.json"
    path.write_text(json.dumps([episode, episode], ensure_ascii=False), encoding="utf-8")
    with pytest.raises(InputError, match="appears twice"):
        read_episodes(path)
