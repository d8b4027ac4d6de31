"""`keem mcp --user NAME`: KEEM's MCP server (chatbot/api/mcp.py) over stdio, for a desktop client (Claude Desktop,
Cursor) that starts it as a subprocess and acts for one user. Over HTTP the app serves the same tools at /mcp with
API tokens (`keem chat`; docs/mcp.md)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from typing import Any

from chatbot.cli.options import EMBEDDER, MODELS, STORE, UPDATES, USER, add_command
from chatbot.settings import Settings
from models.errors import InputError

EPILOG = """examples:
  keem mcp --user minsu                        # Claude Desktop / Cursor start this; it talks MCP on stdin/stdout
  keem mcp --user minsu --model demo --db ~/keem.db
  KEEM_UPDATE_MODEL=openai:gpt-4o keem mcp --user minsu   # memory updates by a model behind an OpenAI-style server"""


def add_mcp_parser(subs: Any) -> argparse.ArgumentParser:
    return add_command(
        subs,
        "mcp",
        "serve one user's memory to an MCP client (Claude Desktop, Cursor) over stdio",
        EPILOG,
        description="Serve KEEM's memory of one user over the Model Context Protocol on stdin/stdout: tools to "
        "search and list the memory, store a conversation's turns, end it (the memory update runs here, in the "
        "background), see why a sentence is there and what an update changed, and forget a sentence; the memory "
        "and its versions as resources. Logs go to stderr. Over HTTP, `keem chat` serves the same at /mcp with API "
        "tokens (docs/mcp.md).",
        parents=[USER, STORE, MODELS, EMBEDDER, UPDATES],
        run=run_mcp,
    )


def run_mcp(settings: Settings, args: argparse.Namespace) -> int:
    """Load the bot, start a worker for this user's memory updates, serve MCP on stdio until the client closes it."""
    from chatbot.api.auth import Caller
    from chatbot.api.context import Api
    from chatbot.api.mcp import build_mcp
    from chatbot.bot import Chatbot, load_bot
    from chatbot.session import check_user_name
    from chatbot.web.backend import AppContext, Backend
    from chatbot.worker import Worker
    from memory.store.connection import describe

    if settings.study:
        raise InputError(
            "keem mcp serves no user trial: a trial's participants talk on its page (unset KEEM_STUDY for keem mcp)"
        )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    name = check_user_name(args.user)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's: what loading prints goes to stderr
        bot = load_bot(settings)
        user_id = bot.store.users.get_or_create(Chatbot.user_key(name))
        # shared: the app or another client may hold sessions on this store now; only long-silent ones end here
        worker = Worker(bot, shared=True).start()
    api = Api(AppContext(Backend(bot, worker)), settings.api_rate)
    server = build_mcp(api, Caller(user_id, name, token_id=0))
    print(f"keem mcp: {name}'s memory ({describe(settings.db_path)}) on stdio", file=sys.stderr)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # a client stops its server so: end the conversation first
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        # the client is gone: its open conversation ends and its memory update waits, stored, for the next start
        # of keem mcp, keem chat or keem worker (a client gives its server seconds to exit, not an update's time)
        _, job_id = api.sessions.end(user_id, "shutdown")
        worker.stop()
        if job_id is not None:
            print(f"the conversation ended; its memory update (job {job_id}) runs at the next start", file=sys.stderr)
    return 0
