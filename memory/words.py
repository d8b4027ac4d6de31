"""English words for counts in every command's output and report ('1 session', '2 sessions') and elapsed times:
the CLI, the trial report, training and evaluation all use these (the lowest layer that needs them is evaluation;
here, below it, any layer may)."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """The count with its noun in the right number: plural(1, "attempt") is '1 attempt', plural(0, "attempt")
    '0 attempts'; `many` for a plural that is not noun + 's'."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def elapsed(seconds: float) -> str:
    """'4.2 s' under a minute, else '13 min 05 s'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"
