"""The docs stay true: README.md, CHANGELOG.md and docs/*.md link only to what exists, and every command in their shell
code blocks exists (a `keem` subcommand with its flags, a `make` target, a script with its flags)."""

from __future__ import annotations

import argparse
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SHELL = {"bash", "sh", "shell", "console", ""}


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters of any script kept), spaces -> '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links() -> list[tuple[str, Path, str]]:
    return [(name(p), p, t) for p in PAGES for t in LINK.findall(prose(p.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("page, target", [(n, t) for n, _, t in links()])
def test_every_relative_link_resolves(page: str, target: str) -> None:
    if re.match(r"[a-z]+:", target):
        return  # https:, mailto: are not checked (no network here)
    path, _, anchor = target.partition("#")
    file = (ROOT / page).parent / path if path else ROOT / page
    assert file.exists(), f"{page} links to {target}, which does not exist"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file.resolve()), f"{page} links to {target}: no heading has that anchor"


def shell_lines() -> list[tuple[str, str]]:
    """(page, command line) of every shell code block: continuations joined, comments and prompts dropped."""
    out = []
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            if lang.strip() not in SHELL:
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if line and not line.startswith("#"):
                    out.append((name(page), line))
    return out


def inline_lines() -> list[tuple[str, str]]:
    """(page, command) of inline code in the prose that starts with a command: `keem chat --study FILE`."""
    out = []
    for page in PAGES:
        for code in re.findall(r"`([^`\n]+)`", FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"(keem|make|python3?|\.venv/bin/\w+) \S", code) and "<" not in code:
                out.append((name(page), code))
    return out


def commands(line: str) -> list[list[str]]:
    """The simple commands of one line (split at && ; |), each without its leading VAR=value assignments."""
    words = shlex.split(line, comments=True)
    out: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";", "|"):
            out.append([])
        else:
            out[-1].append(word)
    result = []
    for words in out:
        while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            result.append(words)
    return result


def flags(words: list[str]) -> list[str]:
    """`--flag` words, also in [--flag VALUE] usage brackets, without their =value."""
    return [w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")]


@cache
def keem_parser() -> argparse.ArgumentParser:
    from chatbot.cli.main import build_parser

    return build_parser()


def subcommand(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of `keem a b ...` as deep as the words name subcommands, and the path taken."""
    parser, path = keem_parser(), []
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        path.append(word)
    return parser, path


def documented(program: str) -> list[tuple[str, list[str]]]:
    out = []
    for page, line in shell_lines() + inline_lines():
        for words in commands(line):
            head = words[0].removeprefix(".venv/bin/")
            if head == program or (program == "python" and head in ("python", "python3")):
                out.append((page, words))
    return out


def test_the_docs_show_commands() -> None:
    assert len(documented("keem")) > 40 and documented("make") and documented("python")


@pytest.mark.parametrize("page, words", documented("keem"), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_keem_command_exists_with_its_flags(page: str, words: list[str]) -> None:
    parser, path = subcommand(words[1:])
    assert path, f"{page}: `{' '.join(words)}` names no keem subcommand"
    assert parser.format_help()  # what `keem <sub> --help` prints
    known = {s for a in parser._actions for s in a.option_strings}
    unknown = [f for f in flags(words) if f not in known]
    assert not unknown, f"{page}: `keem {' '.join(path)}` has no {unknown}"


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = re.findall(r"^([A-Za-z0-9_ -]+):(?!=)", text, re.M)  # `a b: c` makes both a and b
    return {name for rule in rules for name in rule.split()}


@pytest.mark.parametrize("page, words", documented("make"), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_make_target_exists(page: str, words: list[str]) -> None:
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    assert targets and set(targets) <= make_targets(), f"{page}: `{' '.join(words)}`"


@pytest.mark.parametrize("page, words", documented("python"), ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_script_exists_with_its_flags(page: str, words: list[str]) -> None:
    if words[1] in ("-m", "-c"):
        return
    script = ROOT / words[1]
    assert script.is_file(), f"{page}: `{' '.join(words)}`: no {words[1]}"
    source = script.read_text(encoding="utf-8")
    unknown = [f for f in flags(words) if f'"{f}"' not in source]
    assert not unknown, f"{page}: {words[1]} takes no {unknown}"


def test_benchmark_scripts_named_in_prose_exist() -> None:
    for page in PAGES:
        for script in re.findall(r"benchmarks/[a-z_]+\.py", page.read_text(encoding="utf-8")):
            assert (ROOT / script).is_file(), f"{name(page)} names {script}"


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 12_500, f"README.md is {len(text)} characters; move detail into docs/"
    first = "\n".join(text.splitlines()[:40])
    assert "make run" in first and "make test" in first
    assert "openai:" in text and "OPENAI_BASE_URL" in text  # a Korean model in three lines


def test_no_page_speaks_of_issue_numbers_or_commits() -> None:
    for page in PAGES:
        if page.name == "CHANGELOG.md":
            continue
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bissues? #?\d+|(?<![\w/])#\d+\b", text, re.I), f"{name(page)} names an issue"
        hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", h) and re.search("[a-f]", h)]
        assert not hashes, f"{name(page)} names commits {hashes}"


def test_the_screenshots_the_docs_show_are_the_ones_make_screenshots_writes() -> None:
    shown = {t.rsplit("/", 1)[-1] for _, _, t in links() if re.search(r"screenshot[\w-]*\.png$", t)}
    written = set(re.findall(r"screenshot[\w-]*\.png", (ROOT / "docs" / "screenshots.py").read_text(encoding="utf-8")))
    assert shown == written, f"shown {sorted(shown)}, written {sorted(written)}"
