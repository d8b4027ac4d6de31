"""benchmarks/load.py's API callers (`--front api`) against the app's API served in this process: each caller, with
its own token, streams its messages (an Idempotency-Key each), ends its session and polls its job; every message is
stored, every job done, and no answer holds another caller's marker. (The app's own process and `keem serve` are
the e2e tests' part.)"""

from __future__ import annotations

import argparse
import importlib.util
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.api_world import serve_api, token_for

ROOT = Path(__file__).resolve().parents[1]


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_bench", ROOT / "benchmarks" / "load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("job_wait", [30.0, 0.0])
def test_api_callers_send_stream_end_and_follow_the_update_and_lose_nothing(tmp_path: Path, job_wait: float) -> None:
    """The API's users: each update followed with one `GET /v1/jobs/{id}?wait=30`, or (`--job-wait 0`) polled."""
    load = load_bench()
    args = argparse.Namespace(sessions=1, turns=2, poll=0.05, job_wait=job_wait)
    with serve_api(tmp_path / "data") as (base, _, bot, _):
        app: Any = argparse.Namespace(url=base.removesuffix("v1"))
        start = threading.Barrier(3)
        callers = [load.ApiUser(i, app, args, start, token_for(bot, load.user_name(i))) for i in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
        for caller in callers:
            assert caller.failures == [] and len(caller.sent) == 2 and len(caller.update_s) == 1, caller.failures
            others = [load.marker(c.index) for c in callers if c is not caller]
            assert not any(m in text for text in caller.seen for m in others)  # nothing of another caller
            user_id = bot.store.users.find(load.user_name(caller.index))
            said = [
                r["text"]
                for r in bot.store.rows("select text from turns where user_id = ? and role = 'user'", [user_id])
            ]
            assert said == caller.sent  # each message stored once, in order
            assert caller.frames > 0 and caller.retries == []
            assert caller.polls == 1 if job_wait else caller.polls >= 1  # waited: one request for the update


def test_with_pg_the_tokens_are_made_and_the_counts_read_in_postgres(pg_url: str) -> None:
    """`--pg`: the callers' tokens are made, and what was stored read back, in the Postgres store the app runs on."""
    load = load_bench()
    tokens = load.api_tokens(pg_url, 2)
    from memory.backup import open_store

    store = open_store(pg_url)
    try:
        found = [store.tokens.verify(t) for t in tokens]
        assert all(t is not None and t.user_id is not None for t in found) and len(found) == 2
    finally:
        store.close()
    assert load.check_database(pg_url, [])["turns_stored"] == 0
