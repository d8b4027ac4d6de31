"""The ZeroGPU acceptance run: with the stand-in `spaces` package (tests/zerogpu_stub, which pickles what crosses
into and out of each GPU call, as ZeroGPU does) reporting ZeroGPU, `python app.py` imports `spaces` before torch,
calls no GPU function at startup, and in a browser replies and updates memory inside GPU calls. The model is a
loopback OpenAI-compatible server: what is under test is the app around the model, not the model."""

from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import ROOT, app_process, needs_chromium
from tests.e2e.pages import last_bot_says, open_tab, shown_memory
from tests.fake_openai import FakeOpenAIServer
from tests.helpers import answer


def reply(body: dict) -> str:
    return answer(body["messages"])


def join_at_once(url: str, tabs: int) -> list[int]:
    """The status of `tabs` pages' first event (the banner's, fn 0) sent to the queue at the same moment."""

    def join(_: int) -> int:
        body = {"data": [None], "event_data": None, "fn_index": 0, "session_hash": uuid.uuid4().hex[:11]}
        return httpx.post(url + "gradio_api/queue/join", json=body, timeout=30).status_code

    with ThreadPoolExecutor(tabs) as pool:
        return list(pool.map(join, range(tabs)))


@needs_chromium
def test_on_zerogpu_the_app_replies_and_updates_inside_gpu_calls(new_page: Any, tmp_path: Path) -> None:
    log = tmp_path / "spaces.jsonl"
    with FakeOpenAIServer(reply) as server:
        env = {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "zerogpu_stub"), str(ROOT)]),
            "SPACES_ZERO_GPU": "true",
            "SPACES_STUB_LOG": str(log),
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "test",
        }
        with app_process(tmp_path, "openai:fake-gpu", env) as (url, _proc):
            # Gradio lets one event wait on ZeroGPU unless told otherwise: a login sent while the page's own load
            # events waited was refused ("Queue is full", the page showed 오류)
            assert join_at_once(url, 20) == [200] * 20
            page = new_page()
            page.goto(url)
            page.locator("#start-button").get_by_text("대화 시작").wait_for(timeout=60_000)
            started = [json.loads(line) for line in log.read_text().splitlines()]
            page.locator("#name-input textarea, #name-input input").first.fill("민수")
            page.locator("#start-button").click()
            box = page.locator("#message-input textarea")
            box.wait_for(state="visible", timeout=15_000)
            box.fill("나 지난주에 부산으로 이사했어")
            box.press("Enter")
            last_bot_says(page, "잘 들었어요")
            page.locator("#end-button").click()
            page.locator("#progress").get_by_text("완료").wait_for(timeout=60_000)
            open_tab(page, "기억")
            assert "부산" in shown_memory(page, "현재 기억 v1")
            page.context.close()  # an open page holds the app's shutdown for Gradio's 5 s
    # at startup: `spaces` first (before torch), both GPU functions declared, none called, CUDA untouched
    assert started[0]["event"] == "import" and started[0]["torch_loaded"] is False, started
    declared = [e for e in started if e["event"] == "decorated"]
    assert {e["function"] for e in declared} == {"keem_reply", "keem_update"}
    assert not any(e["cuda_initialized"] for e in declared)
    assert not [e for e in started if e["event"] == "start"]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    ran = {e["function"] for e in events if e["event"] == "end"}
    assert {"keem_reply", "keem_update"} <= ran, events
