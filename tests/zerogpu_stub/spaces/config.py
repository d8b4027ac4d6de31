"""The stand-in's config: `Config.zero_gpu` follows SPACES_ZERO_GPU, as the real package's does."""

from __future__ import annotations

import os


class Settings:
    def __init__(self) -> None:
        self.zero_gpu = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


Config = Settings()
