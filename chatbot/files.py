"""Reading the text files users hand the CLI (memory imports, session scripts): UTF-8, a size limit, clear errors."""

from __future__ import annotations

from pathlib import Path

from models.errors import InputError


def read_lines(path: Path, what: str, max_bytes: int, max_lines: int, fix: str) -> list[str]:
    """The file's lines, refused whole (before anything is read into memory or written) when it is missing, not
    UTF-8, larger than `max_bytes` or longer than `max_lines` non-blank lines; `fix` says what to do instead."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError(f"no such {what}: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} {path} ({exc.strerror})") from None
    if path.is_dir():
        raise InputError(f"{path} is a folder; give the {what} file itself")
    if size > max_bytes:
        raise InputError(f"{path} is {size:,} bytes, more than a {what} may be ({max_bytes:,}); {fix}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    count = sum(1 for line in lines if line.strip())
    if count > max_lines:
        raise InputError(f"{path} has {count:,} lines, more than a {what} may have ({max_lines:,}); {fix}")
    return lines
