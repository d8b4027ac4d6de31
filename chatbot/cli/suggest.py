"""A mistyped flag gets a "did you mean" line under its own command's usage (Python 3.14's argparse
`suggest_on_error`, for the Pythons before it)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence


def command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)command parser `argv` reaches: `keem memory show ...` -> the `memory show` parser."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            if word.startswith("-"):
                continue
            break
        parser = subs[0].choices[word]
    return parser


def closest(flag: str, flags: Sequence[str]) -> str | None:
    """The flag `flag` most likely meant: one whose words are all in it ("--chat-model" -> "--model", the most
    words, then the shortest), else the closest spelling ("--modle" -> "--model"), else None."""
    words = set(flag.strip("-").split("-"))
    within = [f for f in flags if set(f.strip("-").split("-")) <= words]
    if within:
        return min(within, key=lambda f: (-len(f.strip("-").split("-")), len(f)))
    close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> list[str]:
    """For each unknown flag, "--x (did you mean --y?)" when the command has a flag close to it."""
    flags = [s for s in parser._option_string_actions if s.startswith("--")]
    hints = []
    for word in unknown:
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and (close := closest(flag, flags)):
            hints.append(f"{flag} (did you mean {close}?)")
    return hints


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but an unrecognized argument is reported by its command's parser (its usage, not
    the whole program's) with the flag it most likely meant."""
    words = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(words)
    if unknown:
        hints = did_you_mean(command_parser(parser, words), unknown)
        command_parser(parser, words).error(
            f"unrecognized arguments: {' '.join(unknown)}" + (f"; {'; '.join(hints)}" if hints else "")
        )
    return args
