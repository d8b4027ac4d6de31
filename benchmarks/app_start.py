"""App start-to-ready time, "End session" to UI answer time and "End session" to a committed memory version,
measured on `python app.py` in a real browser with `make run`'s update settings (replies are capped at 24 tokens
to keep the run short).

python benchmarks/app_start.py                   # demo model (targets: start < 20 s, end-session answer < 0.5 s,
                                                 # end session to committed version <= 60 s)
python benchmarks/app_start.py --model demo --embedder ngram --runs 5
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory.store.notes import english, loads  # noqa: E402
from tests.e2e.conftest import ARGS, CHROMIUM  # noqa: E402  (the browser tests' chromium and flags)
from tests.helpers import free_port  # noqa: E402


def start_app(db: Path, model: str, embedder: str, port: int) -> tuple[subprocess.Popen[bytes], float, float]:
    """Launch app.py; returns (process, seconds until the page answers 200, seconds until the models are loaded)."""
    env = {
        **os.environ,
        "GRADIO_ANALYTICS_ENABLED": "False",
        "KEEM_REPLY_MAX_TOKENS": "24",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "app.py"),
            "--db",
            str(db),
            "--model",
            model,
            "--embedder",
            embedder,
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    loaded: list[float] = []
    tail: list[str] = []

    def watch() -> None:  # load_bot prints "chat: ... | update: ... | embedder: ..." once the models are in
        for raw in proc.stderr:  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace")
            tail[:] = (tail + [line])[-30:]
            if line.startswith("chat: ") and not loaded:
                loaded.append(time.perf_counter() - started)

    threading.Thread(target=watch, daemon=True).start()
    url = f"http://127.0.0.1:{port}/"
    page_ready = None
    while time.perf_counter() - started < 600:
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited ({proc.returncode}): {''.join(tail)[-2000:]}")
        if page_ready is None:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    page_ready = time.perf_counter() - started
            except httpx.HTTPError:
                pass
        if page_ready is not None and loaded:
            return proc, page_ready, loaded[0]
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("app.py was not ready within 600 s")


def wait_until_stable(page: object, quiet_s: float = 2.0, limit_s: float = 300.0) -> None:
    """Wait until the last reply bubble has stopped changing for `quiet_s` (the stream is over)."""
    last, since, started = None, time.perf_counter(), time.perf_counter()
    while time.perf_counter() - started < limit_s:
        text = page.get_by_test_id("bot").last.inner_text()  # type: ignore[attr-defined]
        if text != last:
            last, since = text, time.perf_counter()
        elif time.perf_counter() - since >= quiet_s and text.strip() not in ("", "…"):
            return
        time.sleep(0.2)
    raise SystemExit("the reply did not finish streaming")


def versions(db: Path) -> tuple[int, str | None]:
    """(memory versions committed so far, the latest one's status and note), read beside the running app."""
    if not db.exists():
        return 0, None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        count = conn.execute("select count(*) from memory_versions").fetchone()[0]
        row = conn.execute("select status, notes from memory_versions order by id desc limit 1").fetchone()
    except sqlite3.OperationalError:  # not migrated yet
        return 0, None
    finally:
        conn.close()
    return int(count), (f"{row[0]}: {english(loads(row[1]))}" if row else None)


def wait_for_version(db: Path, after: int, started: float, limit_s: float = 900.0) -> float:
    """Seconds from `started` until the database holds more than `after` versions."""
    while time.perf_counter() - started < limit_s:
        if versions(db)[0] > after:
            return time.perf_counter() - started
        time.sleep(0.2)
    raise SystemExit(f"no memory version committed within {limit_s:.0f} s of ending the session")


def end_session_times(url: str, runs: int, db: Path) -> tuple[list[float], list[float]]:
    """Seconds from clicking "End session" to the page showing its answer (the "new session" button), and to the
    session's memory version being committed, per session."""
    from playwright.sync_api import sync_playwright

    times, committed = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(url)
        page.locator("#name-input textarea, #name-input input").first.fill("bench")
        page.locator("#start-button").click()
        for run in range(runs):
            box = page.locator("#message-input textarea")
            box.wait_for(state="visible", timeout=30_000)
            box.fill(f"안녕, 오늘 {run + 1}번째로 이야기하네. 요즘 회사 일이 많아서 조금 피곤해.")
            box.press("Enter")
            page.get_by_test_id("bot").nth(0).wait_for(timeout=120_000)
            wait_until_stable(page)
            before = versions(db)[0]
            started = time.perf_counter()
            page.locator("#end-button").click()
            try:
                page.locator("#new-session-button").wait_for(state="visible", timeout=30_000)
            except Exception as exc:
                raise SystemExit(
                    f"run {run + 1}: the page did not answer; it says: {page.locator('#main').inner_text()[-600:]!r}"
                ) from exc
            times.append(time.perf_counter() - started)
            committed.append(wait_for_version(db, before, started))
            print(
                f"run {run + 1}: UI {times[-1] * 1000:.0f} ms, committed {committed[-1]:.1f} s ({versions(db)[1]})",
                file=sys.stderr,
            )
            page.locator("#new-session-button").click()
            page.locator("#new-session-button").wait_for(state="hidden", timeout=30_000)
        browser.close()
    return times, committed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="chat model spec (default demo)")
    parser.add_argument("--embedder", default="auto", help="embedder spec (default auto, as the app)")
    parser.add_argument("--runs", type=int, default=3, help="end-session measurements (default 3)")
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    note = None
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        db = Path(tmp) / "keem.db"
        proc, ready, loaded = start_app(db, args.model, args.embedder, port)
        rows.append(("start to page ready (python app.py)", f"{ready:.1f} s", "< 20 s"))
        rows.append(("start to models loaded (chat opens)", f"{loaded:.1f} s", "-"))
        try:
            if os.path.exists(CHROMIUM):
                times, committed = end_session_times(f"http://127.0.0.1:{port}/", args.runs, db)
                rows.append(
                    (
                        f"End session to UI answer (median of {len(times)})",
                        f"{statistics.median(times) * 1000:.0f} ms",
                        "< 500 ms",
                    )
                )
                rows.append(("End session to UI answer (worst)", f"{max(times) * 1000:.0f} ms", "< 500 ms"))
                rows.append(
                    (
                        f"End session to committed version (median of {len(committed)})",
                        f"{statistics.median(committed):.1f} s",
                        "<= 60 s",
                    )
                )
                rows.append(("End session to committed version (worst)", f"{max(committed):.1f} s", "<= 60 s"))
                note = versions(db)[1]
            else:
                rows.append(("End session to UI answer", "skipped", f"needs {CHROMIUM}"))
        finally:
            proc.terminate()
            proc.wait(30)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nmodel={args.model} embedder={args.embedder} cpus={os.cpu_count()} load average={load:.1f}")
    if note:
        print(f"last version: {note}")
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'time':>10}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>10}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
