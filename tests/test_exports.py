"""The organiser's export zips (chatbot/exports.py): one folder inside Gradio's cache, each zip gone within minutes
of being made, and every one, copies in Gradio's cache included, on a forget."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from chatbot.exports import PREFIX, Exports, gradio_cache


def write(folder: Path) -> int:
    folder.mkdir(parents=True)
    (folder / "turns.jsonl").write_text('{"text": "사용자는 청록색 자전거를 탄다"}\n', encoding="utf-8")
    return 1


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    return tmp_path / "gradio"


def test_a_zip_lives_in_gradios_cache_and_is_removed_after_its_age(cache: Path) -> None:
    exports = Exports(max_age_s=0.3)
    archive, result = exports.make(write, "pilot-20261201")
    assert result == 1 and archive.name == f"{PREFIX}pilot-20261201.zip"
    assert archive.is_relative_to(gradio_cache() / "keem-exports")  # Gradio serves it from there without a copy
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # the unzipped folder is gone
    time.sleep(0.6)
    assert not archive.exists() and exports.zips() == []


def test_zips_a_stopped_app_left_are_swept_and_a_forget_removes_every_zip_and_copy(cache: Path) -> None:
    exports = Exports()
    old, _ = exports.make(write, "old")
    os.utime(old.parent, (time.time() - 3600, time.time() - 3600))
    new, _ = exports.make(write, "new")  # making one sweeps the old
    assert not old.exists() and new.exists()
    copy = cache / "0123abcd" / new.name  # a copy Gradio made in its cache
    copy.parent.mkdir()
    copy.write_bytes(new.read_bytes())
    unrelated = cache / "0123abcd" / "recording.wav"
    unrelated.write_bytes(b"RIFF")
    assert Exports().remove_all() == 2
    assert not new.exists() and not copy.exists() and unrelated.exists()


def test_exports_made_while_another_thread_forgets_never_fail_half_way(cache: Path) -> None:
    exports, errors, made = Exports(), [], []

    def organiser() -> None:
        for i in range(20):
            try:
                made.append(exports.make(write, f"s{i}")[0])
            except OSError as exc:  # the forget removed the folder under it: an error, never a partial zip
                errors.append(exc)

    thread = threading.Thread(target=organiser)
    thread.start()
    for _ in range(20):
        Exports().remove_all()
    thread.join()
    Exports().remove_all()
    assert exports.zips() == [] and not list(cache.rglob("*.zip"))
    assert len(made) + len(errors) == 20
