"""The bundled offline demo model end to end (slow: runs SmolLM2-135M; CI runs it). Its one-minute conversion from
GGUF is the one `make install` cached (or one per test run: the `demo_cache` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatbot.cli.main import main


def test_two_scripted_demo_sessions_make_two_nonempty_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, demo_cache: Path
) -> None:
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "demo.db"))
    monkeypatch.setenv("KEEM_CACHE_DIR", str(demo_cache))
    monkeypatch.setenv("KEEM_REPLY_MAX_TOKENS", "24")
    monkeypatch.setenv("KEEM_UPDATE_MAX_TOKENS", "48")
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    # a turn costs seconds on CPU (the Korean prompt is thousands of SmolLM tokens): two, then one
    s1.write_text("나 지난주에 테니스 치다가 손목을 다쳤어. 속상해.\n그래도 다음 달에 제주도 여행 가.\n", "utf-8")
    s2.write_text("손목은 다 나았는데 제주도 여행은 취소했어, 회사 일이 바빠서.\n", encoding="utf-8")
    for number, script in ((1, s1), (2, s2)):
        assert main(["session", "--user", "minsu", "--model", "demo", "--script", str(script)]) == 0
        out = capsys.readouterr().out
        assert out.count("keem> ") == len(script.read_text(encoding="utf-8").splitlines())
        assert f"memory v{number}" in out
    assert main(["memory", "show", "--user", "minsu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 2 and shown["model"] == "demo" and all(s["text"] for s in shown["sentences"])
    assert main(["memory", "history", "--user", "minsu", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [h["version"] for h in history] == [1, 2] and all(h["size"] > 0 for h in history)
    assert history[1]["size"] >= history[0]["size"]  # nothing of session 1 was lost
    assert (demo_cache / "demo-smollm2-135m" / "config.json").is_file()  # the conversion was kept and reused
