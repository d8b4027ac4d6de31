"""The dataset builder's throughput against the ideal (concurrency / latency calls per second) on a loopback
OpenAI-compatible server with fixed latency. Target: at least 0.8 of ideal at concurrency 16, 300 ms latency.

usage: python benchmarks/builder_throughput.py [--latency 0.3] [--concurrency 1 4 16] [--waves 3] [--sessions 4]
       [--plain] [--in-process] [--json]
Each run builds `concurrency * waves` synthetic episodes of `sessions` sessions (every call a cache miss); the
server runs in its own process, as a real one does (--in-process to share this process's GIL instead).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.builder import BuildConfig, build_dataset
from evaluation.corpora.episodes import Episode, Session, Turn
from models.base import Completion, GenerationOptions, Message
from models.openai_backend import OpenAIChatModel
from tests.fake_openai import FakeOpenAIServer


class PlainOpenAIModel(OpenAIChatModel):
    """The same backend answering without streaming: one response object instead of a parsed object per chunk."""

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        response = self.client.with_options(timeout=options.timeout_s).chat.completions.create(
            model=self.model,
            messages=list(messages),
            stream=False,  # type: ignore[arg-type]
            max_tokens=options.max_new_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
        )
        return Completion(response.choices[0].message.content or "")


def reply(body: dict) -> str:
    """A stage-aware answer: one memory sentence per stage, and '통과' from the verifier."""
    prompt = body["messages"][-1]["content"]
    if "새 기억이 올바른지" in prompt:
        return "통과"
    return f"사용자는 벤치마크용 기억 {zlib.crc32(prompt.encode())}번을 가지고 있다."  # distinct: no cache hits


def episodes(n: int, sessions: int) -> list[Episode]:
    return [
        Episode(
            f"b{i}",
            "synthetic",
            [
                Session(
                    f"b{i}-{s}",
                    [Turn("assistant", "요즘 어때요?"), Turn("user", f"{i}번 사용자의 {s}번째 이야기예요.")],
                    [f"사용자는 {i}번 에피소드 {s}번 세션에서 일을 했다."],
                    f"2024-01-{s:02d}",
                )
                for s in range(1, sessions + 1)
            ],
        )
        for i in range(n)
    ]


def serve(latency: float, urls: mp.Queue[str], stop: Any) -> None:
    """The loopback server in its own process, as a real server is (it must not share the builder's GIL)."""
    with FakeOpenAIServer(reply=reply, latency_s=latency) as server:
        server.httpd.RequestHandlerClass.disable_nagle_algorithm = True  # as uvicorn/vLLM send
        urls.put(server.url)
        stop.wait()


@contextmanager
def loopback_server(latency: float, in_process: bool) -> Iterator[str]:
    if in_process:
        with FakeOpenAIServer(reply=reply, latency_s=latency) as server:
            yield server.url
        return
    urls: mp.Queue[str] = mp.Queue()
    stop = mp.Event()
    proc = mp.Process(target=serve, args=(latency, urls, stop), daemon=True)
    proc.start()
    try:
        yield urls.get(timeout=30)
    finally:
        stop.set()
        proc.join(10)


def run(
    concurrency: int, latency: float, waves: int, sessions: int, in_process: bool = False, plain: bool = False
) -> dict[str, Any]:
    eps = episodes(concurrency * waves, sessions)
    with loopback_server(latency, in_process) as url, tempfile.TemporaryDirectory() as tmp:
        backend = PlainOpenAIModel if plain else OpenAIChatModel
        model = backend("bench", base_url=url, api_key="bench", timeout_s=30, max_retries=0)
        started = time.perf_counter()
        stats = build_dataset(eps, model, BuildConfig(Path(tmp), concurrency=concurrency, progress=False))
        wall = time.perf_counter() - started
        assert not stats.errors and stats.cached_calls == 0, stats.errors
    achieved = stats.calls / wall
    ideal = concurrency / latency
    return {
        "concurrency": concurrency,
        "client": "plain" if plain else "stream",
        "calls": stats.calls,
        "seconds": wall,
        "calls_per_s": achieved,
        "ideal_per_s": ideal,
        "ratio": achieved / ideal,
        "rows": stats.rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.3, help="server latency per call, seconds")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--waves", type=int, default=3, help="episodes per worker")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--in-process", action="store_true", help="run the server in this process (shares the GIL)")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also run the largest concurrency with a non-streaming client, for comparison",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(c, args.latency, args.waves, args.sessions, args.in_process) for c in args.concurrency]
    if args.plain:
        results.append(run(max(args.concurrency), args.latency, args.waves, args.sessions, args.in_process, True))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    where = "in this process" if args.in_process else "in its own process"
    print(
        f"builder throughput, loopback server {where}, {args.latency * 1000:.0f} ms latency, "
        f"{args.waves} episodes per worker x {args.sessions} sessions"
    )
    print(f"{'concurrency':>11} {'client':>6} {'calls':>6} {'seconds':>8} {'calls/s':>8} {'ideal/s':>8} {'ratio':>6}")
    for r in results:
        print(
            f"{r['concurrency']:>11} {r['client']:>6} {r['calls']:>6} {r['seconds']:>8.2f} {r['calls_per_s']:>8.2f} "
            f"{r['ideal_per_s']:>8.2f} {r['ratio']:>6.2f}"
        )
    worst = next((r for r in results if r["concurrency"] == 16 and r["client"] == "stream"), None)
    if worst is not None:
        print(f"target >= 0.80 of ideal at concurrency 16: {'met' if worst['ratio'] >= 0.8 else 'NOT met'}")


if __name__ == "__main__":
    main()
