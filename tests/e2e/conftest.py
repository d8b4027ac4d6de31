"""End-to-end tests: the app in a real browser (Debian's chromium via Playwright) and in its own process.

Every test here is slow (marked so at collection). One chromium serves the whole run; each test gets fresh browser
contexts (`new_page`), so no cookie or storage crosses tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
# Debian's chromium-headless-shell: the same Blink and V8 as chromium without the desktop browser around them (old
# headless mode, what Playwright itself runs headless). A page load costs it about two thirds of chromium's CPU, and
# the browser tests are a third of the suite's CPU (docs/contributing.md).
CHROMIUM = "/usr/bin/chromium-headless-shell"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),  # CI must run them
    reason=f"{CHROMIUM} is missing: apt-get install -y chromium-headless-shell fonts-nanum (make browser)",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One chromium for the whole run (each launch costs seconds on 2 cores)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def new_page(browser: Any) -> Iterator[Callable[..., Any]]:
    """A page in a fresh browser context (a person, a device) per call; every context closes after the test."""
    contexts: list[Any] = []

    def make(**options: Any) -> Any:
        context = browser.new_context(**{"locale": "ko-KR", **options})
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()  # a no-op for one the test closed already


@contextmanager
def app_process(
    tmp_path: Path, model: str, env: dict[str, str], *args: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`python app.py --model MODEL` (this checkout's) with the n-gram embedder on a free port; yields its URL and
    process once it answers, and stops it with SIGTERM (unless the test already ended it)."""
    port = free_port()
    log_path = tmp_path / "app.log"
    log = log_path.open("w")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KEEM_", "OPENAI_", "SPACE", "OAUTH_"))}
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--model", model, "--embedder", "ngram", "--db", str(tmp_path / "keem.db")]
        + ["--port", str(port), *args],
        cwd=ROOT,
        env={**clean, "GRADIO_ANALYTICS_ENABLED": "False", **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(url + "config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the app did not start: " + log_path.read_text())
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
        log.close()


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KEEM_CACHE_DIR holding the demo model's converted weights: the user cache `make install` filled, or else
    one conversion (about a minute) shared by every test of this run that needs it."""
    from models.demo import cache_dir, load_demo

    with pytest.MonkeyPatch.context() as env:
        env.delenv("KEEM_CACHE_DIR", raising=False)
        if (cache_dir() / "config.json").is_file():
            return cache_dir().parent
        base = tmp_path_factory.mktemp("keem-cache")
        env.setenv("KEEM_CACHE_DIR", str(base))
        load_demo()
        return base


def dep(url: str, name: str) -> int:
    """The index of the app's event named `name` (api_name), read from its /config."""
    deps = httpx.get(url + "config", timeout=30).json()["dependencies"]  # a starting app loads models meanwhile
    return next(i for i, d in enumerate(deps) if d.get("api_name") == name)


def login_when_ready(url: str, who: str, name: str, timeout: float = 90) -> None:
    """Log in once the models are ready (until then the app answers that they are loading)."""
    import json

    from tests.helpers import call

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "안녕하세요" in json.dumps(call(url, dep(url, "login"), [name], who), ensure_ascii=False):
                return
        except httpx.TimeoutException:  # the app's first answers wait while its models load (the GIL is theirs)
            pass
        time.sleep(0.5)
    raise AssertionError("the app never became ready")
