"""benchmarks/load.py's API front end (`--front api`) in a small run: a few API callers, each with its own token,
stream their messages, end their session and poll its job; every message is in the store once the app has
stopped, no answer or memory holds another user's marker, and no log has an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_load_front_api_small_run_loses_nothing_and_leaks_nothing() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "load.py"), "--front", "api", "--users", "3", "--sessions", "1"]
        + ["--turns", "2", "--workers", "2", "--latency", "0.05", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [row] = json.loads(out.stdout)
    assert row["front"] == "api" and row["client_failures"] == [] and row["log_problems"] == []
    assert row["turns_sent"] == row["turns_stored"] == row["replies_stored"] == 6
    assert row["lost_turns"] == 0 and row["leaks"] == 0 and row["frame_leaks"] == 0
    assert row["jobs_done"] == row["updates_seen"] == 3 and row["jobs_not_done"] == 0
    assert row["own_sentences_in_memory"] >= 3  # each caller's update wrote what they said into their memory
