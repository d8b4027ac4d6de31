"""The dataset builder: the pipeline with a scripted model, resuming, dry runs, and a loopback OpenAI server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.cli.main import main as keem
from evaluation.builder import BuildConfig, build_dataset, write_review
from evaluation.corpora.episodes import Episode, Session, Turn, read_episodes
from evaluation.dry_run import estimate
from memory.updaters.steps import Steps
from models.base import Completion
from models.errors import GenerationError, InputError
from models.fake import RealisticChatModel, ScriptedChatModel, section, stage_of
from tests.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "evaluation" / "fixtures"


def _section(prompt: str, start: str, end: str) -> list[str]:
    body = prompt.rsplit(start, 1)[1]
    return [line for line in body.split(end, 1)[0].splitlines() if line.strip()]


def respond(messages: list[dict[str, Any]]) -> str:
    """A stage-aware fake updater: echoes summaries, accumulates memories, fails verification on '지갑'."""
    prompt = messages[-1]["content"]
    if "요약으로 정리하세요" in prompt:
        return "사용자는 모델이 쓴 요약 문장이다."
    if "감정과 그 감정의 원인" in prompt:
        lines = _section(prompt, "\n요약:\n", "\n답:")
        return "\n".join(line if line.startswith("사용자") else f"사용자는 {line}" for line in lines)
    if "새 기억으로 통합" in prompt:
        return "\n".join(
            _section(prompt, "\n이전 기억:\n", "\n이번 요약:") + _section(prompt, "\n이번 요약:\n", "\n새 기억:")
        )
    if "새 기억이 올바른지" in prompt:
        return "실패: 지갑 이야기가 대화와 다르다" if "지갑" in prompt.rsplit("\n새 기억:\n", 1)[1] else "통과"
    if stage_of(prompt) == "scope":  # which kept sentences this session may change: none, it only accumulates
        return "번호: 없음"
    raise AssertionError(f"unexpected prompt: {prompt[:60]}")


def server_reply(body: dict) -> str:
    return respond(body["messages"])


def rows(out: Path, name: str = "dataset.jsonl") -> list[dict[str, Any]]:
    path = out / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def stable(out: Path) -> list[tuple]:
    """Rows without timings, for comparing two runs."""
    return sorted((r["key"], tuple(r["memory"]), tuple(r["previous_memory"])) for r in rows(out))


def synthetic(path: Path, episodes: int, sessions: int = 3) -> Path:
    """A CareCall-format corpus with distinct content per episode and session."""
    data = [
        [
            {
                "guid": f"e{i}-{n}",
                "date": f"2024-01-{n:02d}",
                "dialogue": [{"role": "assistant", "text": "요즘 어때요?"}, {"role": "user", "text": f"{i}번 일 {n}"}],
                "summary": [f"사용자는 에피소드 {i}의 세션 {n}에서 일을 했다."],
            }
            for n in range(1, sessions + 1)
        ]
        for i in range(episodes)
    ]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def config(out: Path, **kw: Any) -> BuildConfig:
    return BuildConfig(out_dir=out, progress=False, **kw)


# -- the pipeline ----------------------------------------------------------------------------------
def test_pipeline_rows_rejects_and_provenance(tmp_path: Path) -> None:
    model = ScriptedChatModel(responder=respond, spec="fake:updater")
    stats = build_dataset(read_episodes(FIXTURES / "kmsc"), model, config(tmp_path, concurrency=2))
    assert (stats.rows, stats.rejects, stats.steps, stats.errors) == (3, 2, 5, [])
    assert all(o.temperature == 0.0 and o.top_p == 1.0 for o in model.options)
    got = {r["key"]: r for r in rows(tmp_path)}
    assert sorted(got) == ["K2-00001-CC-S3#2", "K2-00001-CC-S3#3", "K2-00002-CC-S4#2"]
    step2, step3 = got["K2-00001-CC-S3#2"], got["K2-00001-CC-S3#3"]
    assert step2["previous_memory"] == [
        "사용자는 테니스를 배우기 시작했다.",
        "사용자는 일주일에 두 번 테니스를 친다.",
        "사용자는 손목이 시큰거린다.",
    ]
    assert step3["previous_memory"] == step2["memory"]  # each accepted output is the next previous memory
    assert step3["source"]["session_ids"] == ["00001-1", "00001-2", "00001-3"]
    assert step3["model"] == "fake:updater" and len(step3["prompt_hash"]) == 12 and step3["verdict"] == "통과"
    assert step3["tokens"]["prompt"] > 0 and [c["stage"] for c in step3["calls"]] == [
        "reflect",
        "update",
        "scope",
        "verify",
    ]
    assert [c["stage"] for c in step2["calls"]] == ["reflect", "reflect", "update", "scope", "verify"]
    rejects = {r["key"]: r["reason"] for r in rows(tmp_path, "rejects.jsonl")}
    assert rejects["K2-00002-CC-S4#3"].startswith("실패: 지갑")
    assert rejects["K2-00002-CC-S4#4"] == "skipped: session 3 failed verification"
    # the verifier of step 3 sees all dialogues up to session 3, and no later one
    verify3 = [
        c[-1]["content"]
        for c in model.calls
        if "새 기억이 올바른지" in c[-1]["content"] and "손목이 다 나아서" in c[-1]["content"]
    ]
    assert len(verify3) == 1 and "테니스를 배우기 시작했어요" in verify3[0] and "[세션 3 (2024-04-10)]" in verify3[0]


def test_missing_summary_is_written_by_the_model(tmp_path: Path) -> None:
    model = ScriptedChatModel(responder=respond)
    build_dataset(read_episodes(FIXTURES / "locomo.json"), model, config(tmp_path))
    row = {r["key"]: r for r in rows(tmp_path)}["conv-2#3"]
    assert row["summary_source"] == "model" and row["summary"] == ["사용자는 모델이 쓴 요약 문장이다."]
    assert sum("요약으로 정리하세요" in c[-1]["content"] for c in model.calls) == 1


# -- dry runs: the build against a model that calls nothing ---------------------------------------
# What ends a previous sentence in the sessions below, as a model doing its job knows: (its words, the summary's)
ENDS = [("서울 마포구에 산다", "부산으로 이사했다"), ("은행에 다닌다", "회사를 그만두었다")]


def ideal(messages: list[dict[str, Any]]) -> str:
    """A model that does its job, answering the way the dry run assumes one does (evaluation/dry_run.py), in its own
    words: a sentence per user turn, an emotion per reflected sentence, the memory kept but for what the session
    ended (claimed after "바뀐 문장:"), 예 to the judge, a pass, no sentence named for the scope."""
    prompt = messages[-1]["content"]
    stage = stage_of(prompt)
    if stage == "summarize":
        said = re.findall(r"^사용자: (.+)$", prompt.rsplit("\n대화 (", 1)[1], re.M)
        return "\n".join(f"사용자는 {text[:40]}라고 했다." for text in said[:10])
    if stage == "reflect":
        felt = ("며 마음이 놓였다.", ", and was relieved.")  # in the summary's language, as a real model writes
        return "\n".join(
            line.rstrip(".") + felt[not re.search("[가-힣]", line)] for line in section(prompt, "\n요약:\n", "\n답:")
        )
    if stage == "update":
        previous = section(prompt, "\n이전 기억:\n", "\n이번 요약:")
        summary = section(prompt, "\n이번 요약:\n", "\n새 기억:")
        ended = {old: new for old in previous for new in summary for was, now in ENDS if was in old and now in new}
        claims = ["바뀐 문장:", *(f"{old} => {new}" for old, new in ended.items())] if ended else ["바뀐 문장: 없음"]
        return "\n".join([*(line for line in previous if line not in ended), *summary, *claims])
    questions = len(section(prompt, "\n질문:\n", "\n답:"))
    answers = {"guard": "\n".join(f"{n}: 예" for n in range(1, questions + 1)), "verify": "통과", "scope": "번호: 없음"}
    if stage not in answers:
        raise AssertionError(f"unexpected prompt: {prompt[:60]}")
    return answers[stage]


def stages(model: ScriptedChatModel) -> dict[str, int]:
    """The calls a fake model was asked, per stage."""
    counts: dict[str, int] = {}
    for messages in model.calls:
        stage = stage_of(messages[-1]["content"]) or "other"
        counts[stage] = counts.get(stage, 0) + 1
    return counts


def moves_and_quits() -> list[Episode]:
    """Sessions that end previous facts (the guard's judge confirms each claimed drop), and one with no summary."""

    def session(n: int, said: str, summary: list[str]) -> Session:
        return Session(f"m{n}", [Turn("assistant", "요즘 어때요?"), Turn("user", said)], summary, f"2024-0{n}-01")

    return [
        Episode(
            "moved",
            "test",
            [
                session(1, "서울 살아요.", ["사용자는 서울 마포구에 산다.", "사용자는 은행에 다닌다."]),
                session(2, "부산으로 이사했어요!", ["사용자는 지난주에 부산으로 이사했다."]),
                session(3, "회사를 그만뒀어요.", ["사용자는 지난달 회사를 그만두었다."]),
                session(4, "바다를 보러 자주 가요. 친구도 사귀었어요.", []),
            ],
        )
    ]


@pytest.mark.parametrize("fixture", ["carecall.json", "kmsc", "msc.jsonl", "locomo.json", "moves"])
def test_a_dry_run_makes_the_calls_a_build_makes_stage_by_stage(tmp_path: Path, fixture: str) -> None:
    """The dry run is the build against a model that calls nothing: per stage, the calls a real build makes with a
    model answering as it assumes; the guard's judge where a session ends a fact, summaries a corpus lacks."""
    episodes = moves_and_quits() if fixture == "moves" else read_episodes(FIXTURES / fixture)
    est = estimate(episodes)
    model = ScriptedChatModel(responder=ideal)
    stats = build_dataset(episodes, model, config(tmp_path))
    assert {stage: count.calls for stage, count in est.stages.items()} == stages(model)
    assert est.calls == len(model.calls) and (est.episodes, est.steps) == (stats.episodes, stats.steps)
    assert stats.rows == stats.steps  # every step passed, as the dry run assumes
    if fixture == "moves":
        assert stages(model)["guard"] == 2 and stages(model)["summarize"] == 1
        assert rows(tmp_path)[-1]["memory"][:2] == [
            "사용자는 2024년 1월 넷째 주에 부산으로 이사했다며 마음이 놓였다.",  # 지난주, said on 2024-02-01
            "사용자는 2024년 2월에 회사를 그만두었다며 마음이 놓였다.",  # 지난달, said on 2024-03-01
        ]


@pytest.mark.parametrize("fixture", ["carecall.json", "kmsc", "msc.jsonl", "locomo.json"])
def test_a_dry_runs_tokens_are_within_2_percent_of_a_build_answering_as_it_assumes(
    tmp_path: Path, fixture: str
) -> None:
    """Tokens: within 2% of a build whose model answers as the dry run assumes (prompts, per stage; completions within
    5%), and at most 10% under one whose model wraps half its answers (thoughts, preambles, fences, repeats, an English
    line): the band docs/evaluation.md states."""
    episodes = read_episodes(FIXTURES / fixture)
    est = estimate(episodes)
    stats = build_dataset(episodes, ScriptedChatModel(responder=ideal), config(tmp_path / "ideal"))
    built: dict[str, int] = {}
    for row in rows(tmp_path / "ideal"):
        for call in row["calls"]:
            built[call["stage"]] = built.get(call["stage"], 0) + call["prompt_tokens"]
    assert {stage: count.prompt_tokens for stage, count in est.stages.items()} == pytest.approx(built, rel=0.02)
    assert est.prompt_tokens == pytest.approx(stats.prompt_tokens, rel=0.02)
    assert est.completion_tokens == pytest.approx(stats.completion_tokens, rel=0.05)
    sloppy = RealisticChatModel.all_habits(ideal, rate=0.5, seed=1)
    wrapped = build_dataset(episodes, sloppy, config(tmp_path / "sloppy", concurrency=1))  # its habits in one order
    total, real = est.prompt_tokens + est.completion_tokens, wrapped.prompt_tokens + wrapped.completion_tokens
    assert wrapped.calls >= est.calls and 0.9 * real <= total < real  # its wrapped answers cut and retried, at times


def test_a_dry_run_leaves_nothing_in_out_a_build_would_resume_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No cache row, dataset row, run.json or lock in --out, before a build or in the middle of one; the throwaway
    folder the dry run builds in is gone."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "out"
    dry = ["build-dataset", str(FIXTURES / "carecall.json"), "--out", str(out), "--dry-run", "--json", "--no-progress"]
    assert keem(dry) == 0
    planned = json.loads(capsys.readouterr().out)["calls"]
    assert not out.exists() and list(scratch.iterdir()) == []
    episodes = read_episodes(FIXTURES / "carecall.json")
    first = ScriptedChatModel(responder=ideal)
    build_dataset(episodes, first, config(out, limit=1))  # a build stopped after its first episode
    files = {path.name: path.read_bytes() for path in out.iterdir()}
    assert keem(dry) == 0 and json.loads(capsys.readouterr().out)["calls"] == planned
    assert {path.name: path.read_bytes() for path in out.iterdir()} == files and list(scratch.iterdir()) == []
    rest = ScriptedChatModel(responder=ideal)
    stats = build_dataset(episodes, rest, config(out))
    assert stats.already_done == 2 and stats.rows == 3 and len(first.calls) + len(rest.calls) == planned


def test_a_dry_run_of_the_first_episodes_counts_only_them(tmp_path: Path) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    model = ScriptedChatModel(responder=ideal)
    build_dataset(episodes, model, config(tmp_path, limit=1))
    one, both = estimate(episodes, limit=1), estimate(episodes)
    assert one.calls == len(model.calls) == 9 < both.calls and (one.episodes, one.steps) == (1, 2)


def test_limit_review_and_model_error(tmp_path: Path) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    stats = build_dataset(episodes, ScriptedChatModel(responder=respond), config(tmp_path, limit=1))
    assert stats.rows == 2 and {r["episode_id"] for r in rows(tmp_path)} == {"cc001"}
    review = write_review(tmp_path, 5).read_text(encoding="utf-8-sig")
    assert review.splitlines()[0].startswith("key,episode_id,session_index,updated") and "cc001#3" in review
    out = tmp_path / "errors"
    failing = ScriptedChatModel(responder=lambda m: (_ for _ in ()).throw(GenerationError("server said 500")))
    stats = build_dataset(episodes, failing, config(out))
    assert len(stats.errors) == 2 and "server said 500" in stats.errors[0] and rows(out) == []
    with pytest.raises(InputError, match="no rows to review"):
        write_review(out, 3)


def test_refuses_to_mix_models_and_cuts_a_torn_row(tmp_path: Path) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    build_dataset(episodes, ScriptedChatModel(responder=respond, spec="fake:a"), config(tmp_path))
    with pytest.raises(InputError, match="new --out directory"):
        build_dataset(episodes, ScriptedChatModel(responder=respond, spec="fake:b"), config(tmp_path))
    data = (tmp_path / "dataset.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "dataset.jsonl").write_text("".join(data[:-1]) + data[-1][:25], encoding="utf-8")  # killed mid-write
    model = ScriptedChatModel(responder=respond, spec="fake:a")
    stats = build_dataset(episodes, model, config(tmp_path))
    assert stats.rows == 1 and stats.cached_calls == stats.calls and len(model.calls) == 0
    assert len(rows(tmp_path)) == 5 == len({r["key"] for r in rows(tmp_path)})


def test_two_builds_never_share_an_out_dir(tmp_path: Path) -> None:
    from evaluation.builder import DatasetBuilder

    first = DatasetBuilder(ScriptedChatModel(responder=respond), config(tmp_path))
    with pytest.raises(InputError, match="another build-dataset is writing"):
        DatasetBuilder(ScriptedChatModel(responder=respond), config(tmp_path))
    assert first.run(read_episodes(FIXTURES / "carecall.json")).rows == 5
    assert DatasetBuilder(ScriptedChatModel(responder=respond), config(tmp_path)).run([]).rows == 0


class Killed(Exception):
    """Stands for the process dying: not a model error, so the whole build stops."""


def test_killed_run_resumes_without_repeating_calls_or_rows(tmp_path: Path) -> None:
    episodes = read_episodes(synthetic(tmp_path / "corpus.json", episodes=6, sessions=4))
    clean = ScriptedChatModel(responder=respond)
    build_dataset(episodes, clean, config(tmp_path / "clean", concurrency=3))
    calls = {"n": 0}
    lock = threading.Lock()

    def dies_after_17(messages: list[dict[str, Any]]) -> str:
        with lock:
            calls["n"] += 1
            if calls["n"] > 17:
                raise Killed("kill -9")
        return respond(messages)

    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        build_dataset(episodes, ScriptedChatModel(responder=dies_after_17), config(out, concurrency=3))
    partial = len(rows(out))
    assert 0 < partial < 18
    again = ScriptedChatModel(responder=respond)
    stats = build_dataset(episodes, again, config(out, concurrency=3))
    assert len(again.calls) == len(clean.calls) - 17  # no finished call is made twice
    assert stats.rows == 18 - partial
    assert stable(out) == stable(tmp_path / "clean") and len(rows(out)) == 18


# -- against a loopback OpenAI-compatible server ---------------------------------------------------
def fast(server: FakeOpenAIServer) -> FakeOpenAIServer:
    """Send with TCP_NODELAY, as real servers do: small SSE writes otherwise wait ~40 ms for delayed ACKs."""
    server.httpd.RequestHandlerClass.disable_nagle_algorithm = True
    return server


def openai_model(url: str, max_retries: int = 3):
    from models.openai_backend import OpenAIChatModel

    return OpenAIChatModel("fake", base_url=url, api_key="test", timeout_s=10, max_retries=max_retries)


class InFlight:
    """Wraps a server reply to measure the most requests in flight at once (arrived but not yet answered)."""

    def __init__(self) -> None:
        self.server: FakeOpenAIServer | None = None
        self.answered = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        with self.lock:
            self.peak = max(self.peak, len(self.server.requests) - self.answered)
            self.answered += 1
        return server_reply(body)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_uses_the_concurrency_it_is_given(tmp_path: Path, concurrency: int) -> None:
    n = 2 * concurrency + 1
    episodes = read_episodes(synthetic(tmp_path / "corpus.json", episodes=n, sessions=2))
    meter = InFlight()
    with fast(FakeOpenAIServer(reply=meter, latency_s=0.08)) as server:
        meter.server = server
        stats = build_dataset(episodes, openai_model(server.url), config(tmp_path / "out", concurrency=concurrency))
    assert stats.rows == n and len(server.requests) == n * 5
    assert meter.peak == concurrency


@pytest.mark.parametrize("status", [429, 500])
def test_retries_injected_failures(tmp_path: Path, status: int) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    with fast(FakeOpenAIServer(reply=server_reply, fail_first=2, fail_status=status)) as server:
        stats = build_dataset(episodes, openai_model(server.url), config(tmp_path, concurrency=2))
    assert stats.errors == [] and stats.rows == 5 and stats.calls == 22
    assert len(server.requests) == 22 + 2


def test_gives_up_after_retries_and_a_rerun_finishes(tmp_path: Path) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")[:1]
    with fast(FakeOpenAIServer(reply=server_reply, fail_first=2, fail_status=503)) as server:
        stats = build_dataset(episodes, openai_model(server.url, max_retries=0), config(tmp_path))
        assert len(stats.errors) == 1 and "503" in stats.errors[0]
        stats = build_dataset(episodes, openai_model(server.url, max_retries=0), config(tmp_path))
        assert stats.errors and rows(tmp_path) == []
        stats = build_dataset(episodes, openai_model(server.url, max_retries=0), config(tmp_path))
    assert stats.errors == [] and stats.rows == 2


@pytest.mark.slow  # two interpreter starts (~3 s each, mostly `import openai`); the in-process test above is fast
def test_killed_process_resumes_with_one_row_per_step(tmp_path: Path) -> None:
    corpus = synthetic(tmp_path / "corpus.json", episodes=4, sessions=3)
    out = tmp_path / "out"
    answered: list[str] = []

    def reply(body: dict) -> str:
        answered.append(json.dumps(body["messages"], ensure_ascii=False))
        return server_reply(body)

    with fast(FakeOpenAIServer(reply=reply, latency_s=0.05)) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        command = [
            sys.executable,
            "-m",
            "chatbot.cli.main",
            "build-dataset",
            str(corpus),
            "--model",
            "openai:fake",
            "--out",
            str(out),
            "--concurrency",
            "2",
            "--no-progress",
        ]
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while len(server.requests) < 10 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first_run = len(answered)
        assert 0 < first_run < 4 * 5
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    keys = [r["key"] for r in rows(out)]
    assert sorted(keys) == sorted(f"e{i}#{t}" for i in range(4) for t in (2, 3))  # one row per passing step
    repeated = len(answered) - len(set(answered))
    assert repeated <= 2  # only calls in flight when the process died (at most --concurrency) are made again


# -- the command -----------------------------------------------------------------------------------
def test_command_dry_run_and_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert keem(["build-dataset", str(FIXTURES / "msc.jsonl"), "--out", str(tmp_path), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "msc" and data["calls"] == 2 + 5 * 4 and data["steps"] == 5
    calls = {stage: count["calls"] for stage, count in data["stages"].items()}
    assert calls == {"reflect": 7, "scope": 5, "update": 5, "verify": 5}
    assert list(tmp_path.iterdir()) == []  # --out is not touched
    assert keem(["build-dataset", str(FIXTURES / "msc.jsonl"), "--out", str(tmp_path)]) == 2
    assert "--model is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        keem(["build-dataset", "--help"])
    assert "example" in capsys.readouterr().out


def test_command_builds_resumes_and_exports_review(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        str(FIXTURES / "kmsc"),
        "--model",
        "openai:fake",
        "--out",
        str(tmp_path),
        "--concurrency",
        "2",
        "--review",
        "2",
        "--price-per-1k-tokens",
        "1",
    ]
    with fast(FakeOpenAIServer(reply=server_reply)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        assert keem(["build-dataset", *args]) == 0
        out = capsys.readouterr()
        assert "3 new rows" in out.out and "2 new rejects" in out.out and "review sheet" in out.out
        assert "build-dataset" in out.err and "calls=18" in out.err  # the progress bar
        assert keem(["build-dataset", *args, "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
    assert again["rows"] == 0 and again["already_done"] == 5 and again["calls"] == 0 and again["cost"] == 0
    assert len(server.requests) == 18
    review = (tmp_path / "review.csv").read_text(encoding="utf-8-sig").splitlines()
    assert review[1].split(",")[2] == "2" and "#3" in "".join(review[2:])  # one row per session step
    (tmp_path / "run.json").write_text('{"model": ', encoding="utf-8")  # a record cut short
    with fast(FakeOpenAIServer(reply=server_reply)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        assert keem(["build-dataset", *args]) == 2
    err = capsys.readouterr().err
    assert "run.json is not valid JSON" in err and "use a new --out" in err and "Traceback" not in err


def test_review_puts_real_updates_first(tmp_path: Path) -> None:
    def row(key: str, t: int, memory: list[str]) -> dict[str, Any]:
        return {
            "key": key,
            "episode_id": key.split("#")[0],
            "session_index": t,
            "previous_memory": ["사용자는 A."],
            "reflected_summary": ["사용자는 B."],
            "memory": memory,
        }

    lines = [
        row("e1#2", 2, ["사용자는 A.", "사용자는 B."]),
        row("e2#2", 2, ["사용자는 A였고 B."]),
        row("e3#3", 3, ["사용자는 A.", "사용자는 B."]),
    ]
    (tmp_path / "dataset.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8"
    )
    sheet = write_review(tmp_path, 2).read_text(encoding="utf-8-sig").splitlines()
    assert [line.split(",")[:4] for line in sheet[1:] if line.startswith("e")] == [
        ["e2#2", "e2", "2", "1"],
        ["e3#3", "e3", "3", "0"],
    ]


def test_a_dry_run_of_one_episode_counts_in_proper_english(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Counts outside the CLI package take memory/words.py's plural too: '1 episode', not '1 episodes'."""
    assert (
        keem(["build-dataset", str(FIXTURES / "msc.jsonl"), "--out", str(tmp_path), "--dry-run", "--limit", "1"]) == 0
    )
    out = capsys.readouterr().out
    assert ": 1 episode, " in out and "1 episodes" not in out and " session steps -> ~9 calls, " in out, out
    assert "\n  reflect: 3 calls, ~" in out and "\n  verify: 2 calls, ~" in out, out  # per stage


def test_a_dry_run_counts_the_scope_calls_of_a_memory_past_the_ceiling(tmp_path: Path) -> None:
    """A first session of 150 summary sentences (too long to reflect: cut twice, so the memory is the summary as it
    is), then two short ones: the scope calls that name what the rewrite sees, one per window of the memory
    (memory/updaters/steps.py scope_windows), and the retried cut answers are counted with their prompts."""
    turns = [Turn("user", "안녕하세요."), Turn("assistant", "반가워요.")]
    summaries = [
        [f"사용자의 {s}번째 세션 {n}번 문장은 이웃 이야기다." for n in range(k)] for s, k in enumerate([150, 5, 5])
    ]
    episodes = [Episode("big", "test", [Session(f"s{s}", turns, summary) for s, summary in enumerate(summaries)])]
    est = estimate(episodes)
    model = ScriptedChatModel(responder=ideal)
    build_dataset(episodes, model, config(tmp_path))
    assert {stage: count.calls for stage, count in est.stages.items()} == stages(model)
    steps = Steps(ask=lambda stage, prompt, n: Completion(""))
    windows = [len(steps.scope_windows(r["previous_memory"], r["reflected_summary"])) for r in rows(tmp_path)]
    assert len(windows) == 2 and 2 <= min(windows) and est.stages["scope"].calls == sum(windows)
    assert est.stages["reflect"].calls == 2 + 1 + 1  # the long summary's reflection cut, retried once, cut again
    assert est.stages["scope"].prompt_tokens <= 2000 * sum(windows)  # no scope call past SCOPE_WINDOW_TOKENS
