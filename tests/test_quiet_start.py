"""A start a newcomer reads without alarm: no licence deprecation box, no faiss loader lines, and a mistyped flag
gets a "did you mean" line under its own command's usage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from chatbot.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_licence_is_an_spdx_string_with_its_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # a table is deprecated by setuptools (a warning box at install)
    assert all((ROOT / f).is_file() for f in project["license-files"])


def test_faiss_says_nothing_about_the_libraries_it_could_not_load():
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from memory.index import IndexCache\nfrom models.embedders import NgramEmbedder\nIndexCache(NgramEmbedder())"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Could not load library" not in done.stderr and "faiss" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["chat", "--chat-model", "demo"], "--chat-model (did you mean --model?)"),
        (["session", "--user", "a", "--modle", "demo"], "--modle (did you mean --model?)"),
        (["memory", "show", "--user", "a", "--jsn"], "--jsn (did you mean --json?)"),
    ],
)
def test_a_mistyped_flag_gets_a_did_you_mean_line(capsys, argv, hint):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and hint in err, err
    assert f"usage: keem {argv[0]}" in err  # its own command's usage, not the whole program's


def test_an_unknown_word_without_a_close_flag_is_still_refused(capsys):
    with pytest.raises(SystemExit):
        main(["chat", "--zzzzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err
