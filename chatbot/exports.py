"""Where the organiser's export zips live, and their removal: one known folder, every zip gone within minutes of
being made, and all of them on any forget ("나를 잊기", "완전히 지우기", `keem memory forget`).

The folder is `keem-exports` inside Gradio's file cache (GRADIO_TEMP_DIR, else the system temp folder's `gradio`).
Gradio serves a file already inside its cache without copying it, so the zip in this folder is the only copy on
the server; removing it removes the download. A copy Gradio may still have made elsewhere in its cache (the zips'
names start with PREFIX) goes on a forget too. A forget in another process (`keem memory forget` from a shell whose
GRADIO_TEMP_DIR differs, another app process) cannot see this process's folder: each app process's worker removes
its own zips as soon as it learns of any forget (chatbot/worker.py evict_forgotten).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)
MAX_AGE_S = 300.0  # an export zip is removed this long after it was made
PREFIX = "keem-export-"
T = TypeVar("T")


def gradio_cache() -> Path:
    """Gradio's file cache, as gradio.utils.get_upload_folder() finds it (without importing gradio)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or (Path(tempfile.gettempdir()) / "gradio")).resolve()


class Exports:
    """The export folder: `make` writes one zip in a fresh, unguessable subfolder; `sweep` removes old ones,
    `remove_all` every one (and any copy of one in Gradio's cache)."""

    def __init__(self, root: Path | None = None, max_age_s: float = MAX_AGE_S):
        self.root = root or gradio_cache() / "keem-exports"
        self.max_age_s = max_age_s

    def make(self, write: Callable[[Path], T], name: str) -> tuple[Path, T]:
        """Let `write` fill a folder called `name`, zip it as PREFIX + name + .zip and remove the folder; returns
        the zip and what `write` returned. The zip is removed after `max_age_s` (or by the next sweep)."""
        self.sweep()
        self.root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="zip-", dir=self.root))
        try:
            result = write(work / name)
            archive = Path(shutil.make_archive(str(work / f"{PREFIX}{name}"), "zip", work, name))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(work / name, ignore_errors=True)
        timer = threading.Timer(self.max_age_s, shutil.rmtree, [work], {"ignore_errors": True})
        timer.daemon = True
        timer.start()
        return archive, result

    def zips(self) -> list[Path]:
        """The exports there are now; one removed meanwhile (its timer, a forget in another thread) is skipped."""
        found = []
        for work in self.root.iterdir() if self.root.is_dir() else ():
            with contextlib.suppress(OSError):  # removed while we looked
                found += [p for p in work.iterdir() if p.name.startswith(PREFIX) and p.suffix == ".zip"]
        return sorted(found)

    def sweep(self, now: float | None = None) -> int:
        """Remove every export older than `max_age_s` (a restart loses the timers); returns how many."""
        now = time.time() if now is None else now
        removed = 0
        for work in self.root.iterdir() if self.root.is_dir() else ():
            try:
                old = now - work.stat().st_mtime >= self.max_age_s
            except OSError:
                continue
            if old:
                shutil.rmtree(work, ignore_errors=True) if work.is_dir() else work.unlink(missing_ok=True)
                removed += 1
        return removed

    def remove_all(self) -> int:
        """Every export, wherever in Gradio's cache a copy of one lies (after a forget it may hold the text)."""
        removed = 0
        if self.root.is_dir():
            removed = len(self.zips())
            shutil.rmtree(self.root, ignore_errors=True)
        cache = gradio_cache()
        for copy in cache.glob(f"*/{PREFIX}*.zip") if cache.is_dir() else ():
            try:
                copy.unlink()
                removed += 1
            except OSError:
                log.warning("could not remove the export copy %s", copy)
        return removed
