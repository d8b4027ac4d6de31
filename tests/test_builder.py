"""The dataset builder: the pipeline with a scripted model, resuming, dry runs, and a loopback OpenAI server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.cli.main import main as keem
from evaluation.builder import BuildConfig, build_dataset, estimate, write_review
from evaluation.corpora.episodes import Episode, Session, Turn, read_episodes
from memory.updaters.steps import Steps
from models.base import Completion
from models.errors import GenerationError, InputError
from models.fake import ScriptedChatModel
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
    assert step3["tokens"]["prompt"] > 0 and [c["stage"] for c in step3["calls"]] == ["reflect", "update", "verify"]
    assert [c["stage"] for c in step2["calls"]] == ["reflect", "reflect", "update", "verify"]
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


def test_dry_run_estimates_the_calls_a_build_makes(tmp_path: Path) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    est = estimate(episodes)
    model = ScriptedChatModel(responder=respond)
    build_dataset(episodes, model, config(tmp_path))
    assert est.calls == len(model.calls) == 2 * 1 + 5 * 3 and est.steps == 5
    assert est.prompt_tokens > 1000 and est.cost(0.01) > 0
    assert estimate(episodes, limit=1).calls == 7


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
    assert stats.rows == n and len(server.requests) == n * 4
    assert meter.peak == concurrency


@pytest.mark.parametrize("status", [429, 500])
def test_retries_injected_failures(tmp_path: Path, status: int) -> None:
    episodes = read_episodes(FIXTURES / "carecall.json")
    with fast(FakeOpenAIServer(reply=server_reply, fail_first=2, fail_status=status)) as server:
        stats = build_dataset(episodes, openai_model(server.url), config(tmp_path, concurrency=2))
    assert stats.errors == [] and stats.rows == 5 and stats.calls == 17
    assert len(server.requests) == 17 + 2


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
    assert data["format"] == "msc" and data["calls"] == 2 + 5 * 3 and data["steps"] == 5
    assert not (tmp_path / "dataset.jsonl").exists()
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
        assert "build-dataset" in out.err and "calls=14" in out.err  # the progress bar
        assert keem(["build-dataset", *args, "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
    assert again["rows"] == 0 and again["already_done"] == 5 and again["calls"] == 0 and again["cost"] == 0
    assert len(server.requests) == 14
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
    assert ": 1 episode, " in out and "1 episodes" not in out and " session steps -> at most " in out, out


def test_a_dry_run_counts_the_scope_calls_of_a_memory_past_the_ceiling() -> None:
    """A memory of 200 sentences by its last session: the scope calls that name what the rewrite sees, one per
    window of the memory (memory/updaters/steps.py scope_windows), are counted with their prompts."""
    turns = [Turn("user", "안녕하세요."), Turn("assistant", "반가워요.")]
    summaries = [
        [f"사용자의 {s}번째 세션 {n}번 문장은 이웃 이야기다." for n in range(k)] for s, k in enumerate([100, 100, 10])
    ]
    sessions = [Session(f"s{s}", turns, summary) for s, summary in enumerate(summaries)]
    est = estimate([Episode("big", "test", sessions)])
    steps = Steps(ask=lambda stage, prompt, n: Completion(""))
    scope = len(steps.scope_windows(summaries[0], summaries[1]))
    scope += len(steps.scope_windows(summaries[0] + summaries[1], summaries[2]))
    assert 4 <= scope <= 8  # windows of dozens of sentences, even beside a 100-sentence summary
    assert est.calls == 3 + 2 * 2 + scope  # reflect each; update and verify each step; the scope calls
