"""Reading the files users hand the project (corpora, datasets, session scripts, memory imports): UTF-8 text (a
byte-order mark dropped), JSON or JSONL, within a size limit where one is given, or one InputError saying what to
fix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from models.errors import InputError


def read_text(
    path: Path, *, if_missing: str = "", what: str = "file", max_bytes: int | None = None, fix: str = ""
) -> str:
    """The file's text, refused whole before it is read when it is missing, a folder, not UTF-8 or (with
    `max_bytes`) larger than that; a UTF-8 byte-order mark is dropped. `if_missing` says what to do when it is not
    there, `fix` what to do when it is too large."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise IsADirectoryError
        if max_bytes is not None and size > max_bytes:
            raise InputError(f"{path} is {size:,} bytes, more than a {what} may be ({max_bytes:,}); {fix}")
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"no such {what}: {path}" + (f"; {if_missing}" if if_missing else "")) from None
    except IsADirectoryError:
        raise InputError(f"{path} is a folder; give the {what} itself") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} {path} ({exc.strerror})") from None


def read_lines(path: Path, what: str, max_bytes: int, max_lines: int, fix: str) -> list[str]:
    """The file's lines (see `read_text`), refused whole when longer than `max_lines` non-blank lines; `fix` says
    what to do instead. For the text files users hand the CLI: memory imports, session scripts."""
    lines = read_text(path, what=what, max_bytes=max_bytes, fix=fix).splitlines()
    count = sum(1 for line in lines if line.strip())
    if count > max_lines:
        raise InputError(f"{path} has {count:,} lines, more than a {what} may have ({max_lines:,}); {fix}")
    return lines


def read_json(path: Path, *, if_missing: str = "", if_invalid: str = "fix the file") -> Any:
    """The parsed JSON file; `if_invalid` is the fix named when it does not parse."""
    text = read_text(path, if_missing=if_missing)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); {if_invalid}"
        ) from None


def read_jsonl(path: Path, *, if_missing: str = "", if_invalid: str = "fix the file") -> list[Any]:
    """One parsed JSON value per non-blank line; `if_invalid` is the fix named for a line that does not parse."""
    rows = []
    for number, line in enumerate(read_text(path, if_missing=if_missing).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} line {number} is not valid JSON ({exc.msg}); {if_invalid}") from None
    return rows


def file_sha256(path: Path) -> str:
    """The file's SHA-256; for a folder (KMSC), over its files' names and bytes in order."""
    path = Path(path)
    digest = hashlib.sha256()
    if not path.is_dir():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()
