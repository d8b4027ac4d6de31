"""KEEM's memory over the Model Context Protocol, on the official `mcp` SDK (MCPServer): the tools and resources an
MCP client (Claude Desktop, Cursor, an agent) calls, each through the same functions as the /v1 routes, so they
keep the API's promises and errors. The transports are elsewhere: stdio for one user (chatbot/cli/mcp.py, `keem
mcp --user NAME`), streamable HTTP at /mcp on the app's server with the API's tokens (chatbot/api/mcp_http.py).

Who a message acts for is set once per message by `Acting` (the SDK's middleware): the stdio server's one user, or
the caller the HTTP endpoint found for the request's token; every tool and resource reads it from CALLER."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Annotated, Any, TypeVar

from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import Field

from chatbot.api import memory
from chatbot.api.auth import Caller
from chatbot.api.context import Api
from chatbot.api.jobs import WAIT_MAX_S, job_json, waited_job
from chatbot.api.messages import record_turns, said_turns
from chatbot.api.schemas import SEARCH_MAX_CHARS, Turn
from models.errors import AccessError, KeemError

NAME = "keem"
CALLER: ContextVar[Caller | None] = ContextVar("keem_mcp_caller", default=None)
SCOPE_KEY = "keem_caller"  # where the HTTP endpoint puts a request's Caller (scope["state"])
INSTRUCTIONS = (
    "KEEM keeps a long-term memory of one user (Korean): sentences about them, the emotions they felt with their "
    "causes, and where each sentence came from. Search it before answering; store the conversation's turns with "
    "add_turns and call end_session when it is over, so KEEM rewrites the memory from it."
)
F = TypeVar("F", bound=Callable[..., Any])


def caller() -> Caller:
    """The user the current message acts for (set by Acting)."""
    who = CALLER.get()
    if who is None:
        raise AccessError("this MCP message carries no API token's user", code="token_missing")
    return who


class Acting:
    """The SDK's middleware: each message acts for `fixed` (stdio: one user), else for the Caller the HTTP
    endpoint put on its request's scope."""

    def __init__(self, fixed: Caller | None = None):
        self.fixed = fixed

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        who = self.fixed
        if who is None and ctx.request is not None:
            who = getattr(ctx.request, "scope", {}).get("state", {}).get(SCOPE_KEY)
        token = CALLER.set(who)
        try:
            return await call_next(ctx)
        finally:
            CALLER.reset(token)


@contextlib.contextmanager
def as_tool_error() -> Iterator[None]:
    """A KeemError raised inside becomes the tool's error result: its code and its message."""
    try:
        yield
    except KeemError as exc:
        raise ToolError(f"{exc.code or exc.kind}: {exc}") from exc


def refusals(fn: F) -> F:
    """A KeemError (an unknown sentence, a memory not written yet, a study's rule) becomes the tool's error result:
    its code and its message, which says what to do; not a crash."""

    if inspect.iscoroutinefunction(fn):  # a tool that waits (job's `wait`)

        @functools.wraps(fn)
        async def waited(*args: Any, **kwargs: Any) -> Any:
            with as_tool_error():
                return await fn(*args, **kwargs)

        return waited  # type: ignore[return-value]

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with as_tool_error():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def conversation_tools(server: MCPServer, api: Api) -> None:
    """The tools of a conversation: its turns stored, its end, and the memory update that follows."""

    @server.tool()
    @refusals
    def add_turns(
        turns: Annotated[list[Turn], Field(min_length=1, description="the conversation's next turns, in order")],
    ) -> dict[str, Any]:
        """Store what was said in the user's open conversation (one opens with the first turn): the user's messages
        and the bot's replies, in order; send only what is new. The memory is rewritten from them when the
        conversation ends (end_session, or after the idle timeout)."""
        who = caller()
        said = said_turns(api, [(t.role, t.content) for t in turns])
        with api.sessions.turn(who.user_id):
            session, ids = record_turns(api, who, said)
        return {"session_id": session.session_id, "turn_ids": ids}

    @server.tool()
    @refusals
    def end_session() -> dict[str, Any]:
        """End the user's open conversation: KEEM's memory update is queued and runs in the background. Returns its
        job (follow it with the job tool); job null when no conversation was open."""
        who = caller()
        session_id, job_id = api.sessions.end(who.user_id)
        job_row = job_json(api.ctx.bot.store, job_id, who) if job_id is not None else None
        return {"session_id": session_id, "job": job_row}

    @server.tool()
    @refusals
    async def job(
        job_id: Annotated[int, Field(description="the id end_session returned")],
        wait: Annotated[
            float,
            Field(
                ge=0,
                le=WAIT_MAX_S,
                description=f"seconds (at most {WAIT_MAX_S:.0f}) to wait for the update to finish; 0 answers at once",
            ),
        ] = 0,
    ) -> dict[str, Any]:
        """A memory update job: status (pending, running, done, failed), stage, and the memory version it made.
        With `wait`, answered as soon as the update is done or failed (or when the wait is over)."""
        return await waited_job(api.ctx.bot.store, job_id, caller(), wait)


def build_mcp(api: Api, fixed: Caller | None = None) -> MCPServer:
    """The MCP server over the API's state (the page's AppContext, its open API conversations): stdio's user is
    `fixed`; over HTTP each request's token says whose memory."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    server: MCPServer = MCPServer(NAME, instructions=INSTRUCTIONS, middleware=[Acting(fixed)], log_level="WARNING")
    root.setLevel(level)  # the SDK configures the root logger when a server is made; the app's logging is the app's
    root.handlers[:] = handlers

    @server.tool()
    @refusals
    def search_memory(
        query: Annotated[
            str, Field(min_length=1, max_length=SEARCH_MAX_CHARS, description="what to find, e.g. the message")
        ],
        k: Annotated[int, Field(ge=1, le=50, description="how many sentences")] = 5,
    ) -> dict[str, Any]:
        """The memory sentences most relevant to a text, best first (the search a reply makes): each with its id,
        score, the emotions it records with their causes and dates, and when the conversations it comes from were."""
        return memory.search_json(api, caller().user_id, query, k)

    @server.tool()
    @refusals
    def list_memory() -> dict[str, Any]:
        """The user's whole current memory: its version number, every sentence with its id, and the emotion records
        (emotion, cause, status, since when). Version 0 with no sentences: nothing is remembered yet."""
        return memory.version_json(api, api.ctx.bot.engine.current(caller().user_id))

    conversation_tools(server, api)

    @server.tool()
    @refusals
    def why(sentence_id: Annotated[int, Field(description="a sentence id of the current memory")]) -> dict[str, Any]:
        """Where a sentence of the current memory came from: the conversations and the user's own words it rests
        on, how it was written (kept, rewritten, added by the user), its emotion and cause."""
        return memory.why_json(api, caller().user_id, sentence_id)

    @server.tool()
    @refusals
    def forget(
        sentence_id: Annotated[int, Field(description="a sentence id of the current memory")],
    ) -> dict[str, Any]:
        """Erase a sentence completely, as the page's 완전히 지우기 does: from every memory version, and the turns
        that said it read [삭제됨]; no copy stays. Returns what was erased and the memory now."""
        who = caller()
        return memory.erase_json(api, who.user_id, memory.current(api, who.user_id), sentence_id)

    @server.tool()
    @refusals
    def changes(
        version: Annotated[int | None, Field(ge=1, description="a version number; the latest when left out")] = None,
    ) -> dict[str, Any]:
        """What a memory version changed over the one before it (kept, added, removed, rewritten) and why."""
        return memory.changes_json(api, caller().user_id, version)

    @server.resource("keem://memory", name="memory", mime_type="application/json")
    def current_memory() -> dict[str, Any]:
        """The user's current memory (as list_memory gives it)."""
        return memory.version_json(api, api.ctx.bot.engine.current(caller().user_id))

    @server.resource("keem://memory/versions/{number}", name="memory version", mime_type="application/json")
    def memory_version(number: int) -> dict[str, Any]:
        """One version of the user's memory by its number (1 is the first), whole, with why it is as it is."""
        try:
            return memory.numbered_json(api, caller().user_id, int(number))
        except KeemError as exc:
            raise ResourceNotFoundError(f"{exc.code or exc.kind}: {exc}") from exc

    return server
