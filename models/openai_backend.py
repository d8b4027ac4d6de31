"""OpenAI-compatible backend (OpenAI, vLLM, Ollama, llama.cpp server) via OPENAI_BASE_URL / OPENAI_API_KEY."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

from models.base import (
    BROKEN,
    ChatModel,
    ChatStream,
    Completion,
    Finish,
    GenerationOptions,
    Message,
    finish_reason,
    whole_characters,
)
from models.errors import ContextOverflowError, GenerationError, ModelUnavailableError


class OpenAIChatModel(ChatModel):
    """Streams chat completions; the client retries 429/5xx and timeouts with exponential backoff."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        context_window: int | None = None,
        check: bool = True,
    ):
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - in the base install
            raise ModelUnavailableError("the openai package is missing; run `make install`") from exc
        import httpx  # the openai client's own HTTP library

        self._openai, self._httpx = openai, httpx
        self.model = model
        self.spec = f"openai:{model}"
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key and "api.openai.com" in self.base_url:
            raise ModelUnavailableError(
                "OPENAI_API_KEY is not set; export it, or set OPENAI_BASE_URL to your own server"
            )
        self.client = openai.OpenAI(
            base_url=self.base_url, api_key=key or "not-needed", timeout=timeout_s, max_retries=max_retries
        )
        self.context_window = context_window or int(os.environ.get("KEEM_OPENAI_CONTEXT", "8192"))
        self.description = f"{model} at {self.base_url}"
        if check:
            self.check()

    def check(self) -> None:
        """Fail early, in one line, when the server cannot be reached (before anything is written)."""
        try:
            self.client.with_options(max_retries=0, timeout=10).models.list()
        except self._openai.APIConnectionError as exc:
            raise ModelUnavailableError(
                f"cannot reach the OpenAI-compatible server at {self.base_url}; start it or fix OPENAI_BASE_URL"
            ) from exc
        except self._openai.AuthenticationError as exc:
            raise ModelUnavailableError(
                f"the server at {self.base_url} rejected the API key; check OPENAI_API_KEY"
            ) from exc
        except self._openai.APIStatusError:
            pass  # some servers lack /models; the first real call will tell

    def _create(self, messages: list[Message], options: GenerationOptions, stream: bool, raw: bool = False):
        """One chat completion request; `raw`: the HTTP response unread, as a context manager (`stream` reads it)."""
        completions = self.client.with_options(timeout=options.timeout_s).chat.completions
        create = completions.with_streaming_response.create if raw else completions.create
        return create(
            model=self.model,
            # our Message is one of openai's message params; mypy does not match a TypedDict to their union
            messages=list(messages),  # type: ignore[arg-type]
            stream=stream,
            max_tokens=options.max_new_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
        )

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        """Text pieces; returns the Finish: the server's finish_reason, and usage where the stream carries it.

        The server-sent events are read as lines and only the fields used here are taken from each chunk's JSON:
        the client's own parsing (its SSE decoder and a typed model a chunk) was about 9% of a busy app's CPU. The
        request itself (retries, timeouts, an error status) is still the client's."""
        reason, usage, pieces = None, None, 0

        def deltas() -> Iterator[str]:
            nonlocal reason, usage, pieces
            with self._create(messages, options, stream=True, raw=True) as response:
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue  # a blank line between events, a comment, an event name
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:  # a proxy's or a broken server's line: say so, not a JSON traceback
                        raise GenerationError(
                            f"the server at {self.base_url} sent a stream event that is not JSON: {data[:80]!r}",
                            code="model_server_failed",
                        ) from None
                    if chunk.get("error"):  # a server that fails mid-stream says so in an event
                        raise GenerationError(
                            f"the server at {self.base_url} failed mid-answer: {_said(chunk['error'])}",
                            code="model_server_failed",
                        )
                    usage = chunk.get("usage") or usage
                    if chunk.get("choices"):
                        choice = chunk["choices"][0]
                        reason = choice.get("finish_reason") or reason
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            pieces += 1
                            yield content

        with self._errors():
            # a server may send the bytes of a character the token limit cut as '\ufffd'; the reply ends before it
            yield from whole_characters(deltas())
        # Without usage, a stream's chunk count stands in for its tokens (servers send about one token a chunk).
        completion = usage.get("completion_tokens") if usage else None
        return Finish(
            finish_reason(reason, completion if usage else pieces, options.max_new_tokens),
            usage.get("prompt_tokens") if usage else None,
            completion,
        )

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        """One non-streaming request: no per-chunk parsing, which dominates client CPU at high concurrency."""
        with self._errors():
            response = self._create(messages, options, stream=False)
        if not response.choices:
            return Completion("", Finish("stop"))
        choice, usage = response.choices[0], response.usage
        text = choice.message.content or ""
        completion = usage.completion_tokens if usage else None
        # A server that gives neither a reason nor usage: our own (generous) count of the answer stands in.
        counted = completion if completion is not None or choice.finish_reason else self.count_tokens(text)
        return Completion(
            text.rstrip(BROKEN),  # as `stream` does: a character the token limit cut is left out, not shown broken
            Finish(
                finish_reason(choice.finish_reason, counted, options.max_new_tokens),
                usage.prompt_tokens if usage else None,
                completion,
            ),
        )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (self._openai.APIConnectionError, self._httpx.TransportError) as exc:  # before or during the answer
            raise GenerationError(
                f"lost the OpenAI-compatible server at {self.base_url} ({exc}); check that it is running",
                code="model_server_down",
            ) from exc
        except self._openai.BadRequestError as exc:
            if not _context_exceeded(exc):
                raise GenerationError(
                    f"the server at {self.base_url} refused the request (400): {exc.message}", code="model_refused"
                ) from exc
            # the same error as a local model's prompt that does not fit: unusable output, never a failed job
            raise ContextOverflowError(
                f"the prompt does not fit the context of {self.model} at {self.base_url} ({exc.message}); set "
                "KEEM_OPENAI_CONTEXT to the context the server runs with, or shorten the message or lower the "
                "memory budget (KEEM_TOKEN_BUDGET)"
            ) from exc
        except self._openai.APIStatusError as exc:
            raise GenerationError(
                f"the server at {self.base_url} answered {exc.status_code} after retries: {exc.message}",
                code="model_server_failed",
                status=exc.status_code,
            ) from exc


def _context_exceeded(exc: Exception) -> bool:
    """Whether a 400 says the request is past the model's context (OpenAI, vLLM and llama-server word it so)."""
    text = f"{exc} {getattr(exc, 'body', '')}".lower()
    return any(key in text for key in ("context_length_exceeded", "exceed_context", "context length", "context size"))


def _said(error: object) -> str:
    """What an error event of a stream says: its message, or the event as it came."""
    return str(error.get("message") or error) if isinstance(error, dict) else str(error)
