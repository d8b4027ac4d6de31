"""The MCP server (chatbot/api/mcp.py) over streamable HTTP at /mcp on the app's own server, beside /v1: the same
bearer tokens, checked on every request by the API's Auth (a user's token acts for its user; an app token for the
user `?user=NAME` names; the same rate per user and a user trial's rules). A missing or bad token is 401 with the
API's JSON error and reaches nothing of the SDK; an MCP session stays bound to the token that opened it (the SDK
answers another's 404).

The SDK's session manager needs a running task group: the app's lifespan (launch_options' app_kwargs) starts one
per launch. Every request carries a token a web page cannot know, so the SDK's Host-header check (DNS rebinding)
is not needed on top of it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chatbot.api.context import Api
from chatbot.api.errors import error_response
from chatbot.api.mcp import SCOPE_KEY, build_mcp
from models.errors import KeemError, ModelUnavailableError

PATH = "/mcp"


def bearer(scope: Scope) -> str | None:
    """The token of `Authorization: Bearer <token>`, or None."""
    value = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class McpEndpoint:
    """The ASGI app at /mcp: the token's Caller, then the SDK's streamable HTTP transport."""

    def __init__(self, api: Api):
        self.api = api
        self.server = build_mcp(api)
        self.manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the app's server runs: a fresh session manager (one per launch, as the SDK requires)."""
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        user = (query.get("user") or [None])[0]
        try:
            if self.manager is None:
                raise ModelUnavailableError("the MCP endpoint runs with the app's server: start it with keem chat")
            who = await anyio.to_thread.run_sync(
                lambda: self.api.auth.caller(bearer(scope), user, create=True)  # the store: off the event loop
            )
        except KeemError as exc:
            await error_response(exc)(scope, receive, send)
            return
        principal = AccessToken(
            token=f"keem-token-{who.token_id}", client_id=f"{who.token_id}:{who.user_id}", scopes=[]
        )
        state: dict[str, Any] = dict(scope.get("state") or {})
        state[SCOPE_KEY] = who
        await self.manager.handle_request(
            {**scope, "user": AuthenticatedUser(principal), "state": state}, receive, send
        )


def mcp_route(endpoint: McpEndpoint) -> Route:
    """The route that puts the MCP endpoint at /mcp of the app's server (before Gradio's own routes)."""
    return Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"])


def lifespan(endpoint: McpEndpoint) -> Any:
    """The app's lifespan (Gradio's app_kwargs['lifespan']): the endpoint runs while the server does."""

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[None]:
        async with endpoint.running():
            yield

    return run
