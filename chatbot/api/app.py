"""The API as one FastAPI app, mounted at /v1 on the Gradio app's own server (chatbot/web/app.py launch_options):
the same port and address as the page, its own errors and its OpenAPI schema at /v1/openapi.json. Gradio's routes
stay as closed as they were (chatbot/web/guard.py)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from chatbot.api import chat, jobs, memory, messages
from chatbot.api.context import Api
from chatbot.api.errors import error_body, on_http, on_invalid, on_keem_error, on_unexpected
from chatbot.settings import Settings
from chatbot.web.backend import AppContext
from models.errors import InputError, KeemError

PREFIX = "/v1"
MAX_BODY = 1 << 20  # bytes: a long conversation resent whole fits; anything larger is refused (413)
RATE_PER_MIN = Settings.api_rate  # requests a minute per user (KEEM_API_RATE: build_app's api_rate)


class BodyLimit:
    """Refuses a body over `limit` bytes (413) before it is read, by its Content-Length or as it arrives."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.limit:
            await self.too_large(send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise InputError(
                    f"the request body is over {self.limit:,} bytes", code="body_too_large", limit=self.limit
                )
            return message

        await self.app(scope, counted, send)

    async def too_large(self, send: Send) -> None:
        error = InputError(
            f"the request body is over {self.limit:,} bytes; send less (a conversation's last message is enough)",
            code="body_too_large",
            limit=self.limit,
        )
        body = json.dumps(error_body(error), ensure_ascii=False).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def build_api(ctx: AppContext, rate_per_min: int = RATE_PER_MIN) -> FastAPI:
    """The /v1 app over the page's AppContext (its backend, study and worker)."""
    api = FastAPI(
        title="KEEM chat API",
        version="1",
        description="A Korean chatbot's long-term memory for other programs: OpenAI-compatible chat that remembers, "
        "and the memory itself (read, change with If-Match, erase). See docs/api.md.",
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    api.state.keem = Api(ctx, rate_per_min)
    api.add_exception_handler(KeemError, on_keem_error)
    api.add_exception_handler(RequestValidationError, on_invalid)
    api.add_exception_handler(HTTPException, on_http)
    api.add_exception_handler(Exception, on_unexpected)
    for part in (chat, messages, memory, jobs):
        api.include_router(part.router)
    api.add_middleware(BodyLimit, limit=MAX_BODY)
    return api


def mount(api: FastAPI) -> Mount:
    """The route that puts the API under /v1 of the app's server (FastAPI's `routes`, before Gradio's own)."""
    return Mount(PREFIX, app=api)
