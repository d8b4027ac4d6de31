"""Reading the files the evaluation commands are handed: UTF-8 text, JSON or JSONL, or one InputError saying what
to fix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from models.errors import InputError


def read_text(path: Path, *, if_missing: str = "") -> str:
    """The file's text (a UTF-8 byte-order mark is dropped); `if_missing` says what to do when it is not there."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"no such file: {path}" + (f"; {if_missing}" if if_missing else "")) from None
    except IsADirectoryError:
        raise InputError(f"{path} is a folder; give the file itself") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror})") from None


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
