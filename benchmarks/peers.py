"""mem0 and KEEM's strategies side by side, on the same Korean sessions, the same model server and the same embedder.

usage: pip install -e '.[peers]'   (mem0ai, faiss-cpu)
       python benchmarks/peers.py [--settings small sessions sessions-large] [--systems mem0 keem operations
       accumulate] [--json]

The sessions are benchmarks/update_correctness.py's (evaluation/fixtures/update_correctness.json: changes said in
words the old fact does not share, finished episodes, unrelated facts): each case starts from its memory (given to
mem0 with `infer=False`, to KEEM as the previous version) and goes through its sessions. One loopback
OpenAI-compatible server (this file, http.server on 127.0.0.1) answers every system as an ideal model would: KEEM's
prompts with update_correctness's `Ideal` (no bad habits, a verifier that names contradictions), mem0's own
additive extraction prompt with the facts the user's turns state, as JSON; it cuts answers at `max_tokens` and counts
calls and tokens per system. Its /v1/embeddings serves the ngram embedder (models/embedders.py), which KEEM uses
in-process. mem0 runs offline: MEM0_TELEMETRY=False, MEM0_DIR a temp folder, llm and embedder providers `openai`
with `openai_base_url` on loopback, vector store `faiss` with a path.

One row per system: system, outdated_left (an old state still stored word for word, after its change), changes,
unrelated_lost (an unrelated fact no longer in memory), unrelated, llm_calls, prompt_tokens, seconds.

What it shows: what each system's machinery does with a perfect model. mem0 2.2.1's `add()` makes one extraction
call and only ever adds (its prompt says to skip what memory holds and to link, not replace), so every outdated
state stays beside its replacement; it never loses an unrelated fact either. What it does not show: answer
quality (no real model answers here), retrieval quality (mem0 is built to search its memories, KEEM to keep a
consistent profile in the prompt), or mem0's hosted platform or graph memory, which were not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.long_horizon import present
from benchmarks.update_correctness import Case, Counted, Ideal, World, cases, load_world, run_case
from models.base import estimate_tokens
from models.embedders import Embedder, NgramEmbedder
from models.fake import cut_to_budget

SYSTEMS = ("mem0", "keem", "operations", "accumulate")
SETTINGS = ("small", "sessions", "sessions-large")
FIELDS = ("system", "outdated_left", "changes", "unrelated_lost", "unrelated", "llm_calls", "prompt_tokens", "seconds")


# -- the loopback model server --------------------------------------------------------------------------------
class IdealServer:
    """OpenAI-compatible chat completions and embeddings on 127.0.0.1, answering as an ideal model would."""

    def __init__(self, world: World, embedder: Embedder):
        self.keem = Ideal(world, catches=True)
        self.by_turn = self.keem.by_turn
        self.embedder = embedder
        self.calls = 0
        self.prompt_tokens = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, data: dict[str, Any], status: int = 200) -> None:
                body = json.dumps(data, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "ideal", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.endswith("/embeddings"):
                    self._json(server.embeddings(body))
                else:
                    self._json(server.chat(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> IdealServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def count(self) -> tuple[int, int]:
        with self.lock:
            return self.calls, self.prompt_tokens

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        text = "\n".join(str(m.get("content", "")) for m in messages)
        answer = self.mem0(text) if "## New Messages" in text else self.keem(messages)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 4096
        answer, finish = cut_to_budget(answer, int(limit))
        prompt = estimate_tokens(text)
        with self.lock:
            self.calls += 1
            self.prompt_tokens += prompt
        return {
            "id": "ideal",
            "object": "chat.completion",
            "model": body.get("model", "ideal"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": estimate_tokens(answer),
                "total_tokens": prompt + estimate_tokens(answer),
            },
        }

    def mem0(self, prompt: str) -> str:
        """mem0's additive extraction, ideally: every fact the new messages' user turns state, as its JSON."""
        new = prompt.rsplit("## New Messages", 1)[1].split("\n## ", 1)[0]
        turns = [line[len("user: ") :].strip() for line in new.splitlines() if line.startswith("user: ")]
        facts = [self.by_turn[t].text for t in turns if t in self.by_turn]
        return json.dumps({"memory": [{"id": str(i), "text": f} for i, f in enumerate(facts)]}, ensure_ascii=False)

    def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        vectors = self.embedder.embed(texts) if texts else []
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vectors)
            ],
            "model": "ngram",
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }


# -- the systems ----------------------------------------------------------------------------------------------
def score(case: Case, texts: list[str]) -> dict[str, int]:
    changed = [f for session in case.sessions for f in session if f.kind == "change"]
    olds = {f.chain: f.text for f in case.initial if f.kind == "change"}
    unrelated = [f for f in case.initial if f.kind == "stable"] + [
        f for session in case.sessions for f in session if f.kind == "stable"
    ]
    return {
        "outdated_left": sum(olds[f.chain] in texts for f in changed),
        "changes": len(changed),
        "unrelated_lost": sum(not present(f, texts) for f in unrelated),
        "unrelated": len(unrelated),
    }


def offline_mem0(folder: Path) -> None:
    """mem0 reads these when it is first imported: no telemetry, its files in `folder` (not ~/.mem0)."""
    if "mem0" in sys.modules and os.environ.get("MEM0_TELEMETRY") != "False":
        raise RuntimeError("mem0 was imported before its telemetry was turned off; run peers in a fresh process")
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(folder / "mem0")


def run_mem0(all_cases: list[Case], server: IdealServer, dims: int, folder: Path) -> dict[str, int]:
    """Each case as one mem0 user: its memory added verbatim (infer=False), then each session's turns added."""
    offline_mem0(folder)
    from mem0 import Memory

    memory = Memory.from_config(
        {
            "llm": {
                "provider": "openai",
                "config": {"model": "ideal", "api_key": "local", "openai_base_url": server.url, "temperature": 0},
            },
            "embedder": {
                "provider": "openai",
                "config": {
                    "model": "ngram",
                    "api_key": "local",
                    "openai_base_url": server.url,
                    "embedding_dims": dims,
                },
            },
            "vector_store": {
                "provider": "faiss",
                "config": {"collection_name": "peers", "path": str(folder / "faiss"), "embedding_model_dims": dims},
            },
            "history_db_path": str(folder / "history.db"),
        }
    )
    total = {"outdated_left": 0, "changes": 0, "unrelated_lost": 0, "unrelated": 0}
    for n, case in enumerate(all_cases):
        user = f"user{n}"
        for f in case.initial:
            memory.add([{"role": "user", "content": f.text}], user_id=user, infer=False)
        for facts in case.sessions:
            turns = []
            for f in facts:
                turns += [{"role": "user", "content": f.turn}, {"role": "assistant", "content": f.reply or "그렇군요."}]
            memory.add(turns, user_id=user)
        stored = memory.get_all(filters={"user_id": user}, top_k=1000)
        rows = stored.get("results", stored) if isinstance(stored, dict) else stored
        texts = [r["memory"] for r in rows]
        for k, v in score(case, texts).items():
            total[k] += v
    return total


def run_keem(strategy: str, all_cases: list[Case], server: IdealServer, embedder: Embedder) -> dict[str, int]:
    from models.openai_backend import OpenAIChatModel

    total = {"outdated_left": 0, "changes": 0, "unrelated_lost": 0, "unrelated": 0}
    for case in all_cases:
        model = Counted(OpenAIChatModel("ideal", base_url=server.url, api_key="local"))
        got = run_case(strategy, case, model, embedder)
        for k in total:
            total[k] += got[k]
    return total


def run(systems: tuple[str, ...] = SYSTEMS, settings: tuple[str, ...] = SETTINGS) -> list[dict[str, Any]]:
    world = load_world()
    embedder = NgramEmbedder()
    all_cases = cases(world, settings)
    rows = []
    with IdealServer(world, embedder) as server, tempfile.TemporaryDirectory(prefix="keem-peers-") as tmp:
        for system in systems:
            calls, tokens = server.count()
            started = time.perf_counter()
            if system == "mem0":
                got = run_mem0(all_cases, server, embedder.embed(["x"]).shape[1], Path(tmp))
            else:
                got = run_keem(system, all_cases, server, embedder)
            after_calls, after_tokens = server.count()
            rows.append(
                {
                    "system": system,
                    **got,
                    "llm_calls": after_calls - calls,
                    "prompt_tokens": after_tokens - tokens,
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(tuple(args.systems), tuple(args.settings))
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    print(f"settings {' '.join(args.settings)}; ideal model on loopback, ngram embedder")
    print(" ".join(f"{f:>15}" for f in FIELDS))
    for r in rows:
        print(" ".join(f"{r[f]!s:>15}" for f in FIELDS))


if __name__ == "__main__":
    main()
