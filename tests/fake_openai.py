"""A loopback OpenAI-compatible server for tests: scripted replies, latency and failure injection.

Like a real backend it stops at `max_tokens` (tokens estimated as models.base.estimate_tokens counts them) and
says so: finish_reason "length", and `usage` on non-streaming answers. Local servers differ, and `flavor` imitates
them: "openai" (the above), "ollama" (no key; its /v1/models list; an older Ollama says "stop" even for an answer
cut at max_tokens, which only `usage` gives away), "llama-server" (a /v1/models list with "meta", `usage` and
"timings" in the last stream chunk), "vllm" (as "openai", its /v1/models entries owned by "vllm", nothing but /v1),
"bare" (no /v1/models at all, no finish reason, no usage). `models` replaces the names /v1/models lists (and an
"ollama" server's /api/tags, Ollama's own list). `fail_mid`: a stream fails after that many chunks; `garbled_mid`:
a stream sends a line that is not JSON after that many.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from models.base import estimate_tokens
from models.fake import cut_to_budget


def tokens(text: str) -> list[str]:
    """`text` in pieces of one estimated token each (a Hangul syllable, or up to three other characters)."""
    pieces: list[str] = []
    for ch in text:
        if ord(ch) >= 0x1100 or not pieces or ord(pieces[-1][-1]) >= 0x1100 or len(pieces[-1]) == 3:
            pieces.append(ch)
        else:
            pieces[-1] += ch
    return pieces


def context_error(flavor: str, context: int, prompt: int) -> dict:
    """The 400 body a server sends for a request past its context: OpenAI's and vLLM's wording, llama-server's."""
    if flavor == "llama-server":
        return {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": context,
            }
        }
    return {
        "error": {
            "message": f"This model's maximum context length is {context} tokens. However, your messages resulted "
            f"in {prompt} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


class FakeOpenAIServer:
    """Serves /v1/models and /v1/chat/completions (streaming or not) on 127.0.0.1."""

    def __init__(
        self,
        reply: Callable[[dict], str] = lambda body: "안녕하세요",
        latency_s: float = 0.0,
        fail_first: int = 0,
        fail_status: int = 429,
        flavor: str = "openai",
        context: int | None = None,
        chunk_delay_s: float = 0.0,
        models: list[str] | None = None,
        fail_mid: int | None = None,
        garbled_mid: int | None = None,
    ):
        assert flavor in ("openai", "ollama", "llama-server", "vllm", "bare"), flavor
        self.models = models
        self.reply, self.latency_s, self.flavor = reply, latency_s, flavor
        self.context = context  # tokens the server really runs with: a longer request is refused as servers do
        self.chunk_delay_s = chunk_delay_s  # a pause between streamed chunks (a slow model, visibly streaming)
        self.fail_mid = fail_mid  # a stream sends this many chunks, then an error event, as vLLM does on a failure
        self.garbled_mid = garbled_mid  # a stream sends this many chunks, then a line that is not JSON (a bad proxy)
        self.fail_first, self.fail_status = fail_first, fail_status
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, data: dict) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                ollama_tags = server.flavor == "ollama" and self.path == "/api/tags"
                if server.flavor == "bare" or (self.path != "/v1/models" and not ollama_tags):
                    self._json(404, {"error": "not found"})
                elif ollama_tags:
                    names = server.models or ["exaone3.5:7.8b"]
                    self._json(200, {"models": [{"name": n, "model": n, "size": 0} for n in names]})
                elif server.models is not None:
                    owner = {"ollama": "library", "vllm": "vllm", "llama-server": "llamacpp"}.get(server.flavor, "x")
                    data = [{"id": n, "object": "model", "owned_by": owner} for n in server.models]
                    self._json(200, {"object": "list", "data": data})
                elif server.flavor == "ollama":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": "exaone3.5:7.8b", "object": "model", "created": 0, "owned_by": "library"}],
                        },
                    )
                elif server.flavor == "llama-server":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": "EXAONE-3.5-7.8B-Q4_K_M.gguf",
                                    "object": "model",
                                    "owned_by": "llamacpp",
                                    "meta": {"n_ctx_train": 32768},
                                }
                            ],
                        },
                    )
                else:
                    self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    failing = server.fail_first > 0
                    server.fail_first -= 1 if failing else 0
                time.sleep(server.latency_s)
                if failing:
                    self._json(server.fail_status, {"error": {"message": "injected failure"}})
                    return
                prompt = sum(estimate_tokens(str(m.get("content", ""))) for m in body["messages"])
                if server.context is not None and prompt + int(body.get("max_tokens") or 0) > server.context:
                    self._json(400, context_error(server.flavor, server.context, prompt))
                    return
                text, reason = server.reply(body), "stop"
                if body.get("max_tokens"):
                    text, reason = cut_to_budget(text, int(body["max_tokens"]))
                reason = {"openai": reason, "vllm": reason, "llama-server": reason, "ollama": "stop", "bare": None}[
                    server.flavor
                ]
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": estimate_tokens(text),
                    "total_tokens": prompt + estimate_tokens(text),
                }
                if not body.get("stream"):
                    self._json(
                        200,
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "created": 0,
                            "model": "fake",
                            "choices": [
                                {"index": 0, "finish_reason": reason, "message": {"role": "assistant", "content": text}}
                            ],
                            **({} if server.flavor == "bare" else {"usage": usage}),
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for n, piece in enumerate(tokens(text)):  # about one token a chunk, as servers stream
                    if n == server.fail_mid:
                        failed = {"error": {"message": "injected failure mid-stream", "type": "server_error"}}
                        self.wfile.write(f"data: {json.dumps(failed)}\n\n".encode())
                        return
                    if n == server.garbled_mid:
                        self.wfile.write(b'data: {"choices": [{"delta": {"content"\n\n')
                        return
                    chunk = {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "fake",
                        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    if server.chunk_delay_s:
                        self.wfile.flush()
                        time.sleep(server.chunk_delay_s)
                last = {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "fake",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
                }
                if server.flavor == "llama-server":
                    last.update(usage=usage, timings={"predicted_n": usage["completion_tokens"]})
                self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        self.handler = Handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.serving = False

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        self.serving = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _serve(self) -> None:
        # shutdown() waits for the loop's next look at its flag: every 0.5 s by default, up to half a second at the
        # end of each of the suite's hundreds of fake servers
        self.httpd.serve_forever(poll_interval=0.05)

    def down(self) -> None:
        """Stop serving, as a server that was shut down: its port refuses connections until `up`."""
        if self.serving:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.serving = False

    def up(self) -> None:
        """Serve again on the same port (a restarted server)."""
        if not self.serving:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()
            self.serving = True
