"""How often a streaming reply (or opening question) shows a frame. Every frame sends the chat again and Gradio diffs
it in this process, under one GIL, so the replies streaming at once share a budget of frames a second: one reply
alone shows up to 5 frames a second (text that grows five times a second reads as streaming; 20 cost four times the
app CPU for the same reply); 32 at once (an `openai:` server, KEEM_REPLY_CONCURRENCY) show under 2 each.
Without the budget, 20 users' replies on a loopback server made 76 frames a reply instead of 10, the app spent a
whole core on them and a reply's p95 went from 11 s to 24 s (benchmarks/load.py). The last pieces always show: the
reply's final frame carries them.

The HTTP API's streamed replies are paced the same way with a budget of their own (chatbot/api/context.py): a chunk
costs far less than a page frame, but one per model token made 40 callers' replies at once wait on the chunks (an
API turn 34 ms of app CPU and a reply p95 of 1.24 s, against 24 ms and 0.84 s paced: docs/benchmarks.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

FRAME_S = 0.2  # the shortest time between two frames of one reply
FRAMES_PER_S = 40  # frames a second for all the replies streaming in this process together


class Frames:
    def __init__(self, per_s: float = FRAMES_PER_S, min_s: float = FRAME_S):
        self.per_s, self.min_s, self.streaming, self.lock = per_s, min_s, 0, threading.Lock()

    def interval(self) -> float:
        """Seconds between two frames of one reply while `streaming` replies share the budget."""
        return max(self.min_s, self.streaming / self.per_s)

    @contextmanager
    def stream(self) -> Iterator[Callable[[], bool]]:
        """One reply streams for the block; it gets `due()`, true when its next frame may show (the first at once)."""
        with self.lock:
            self.streaming += 1
        shown_at = -float("inf")

        def due() -> bool:
            nonlocal shown_at
            now = time.monotonic()
            if now - shown_at < self.interval():
                return False
            shown_at = now
            return True

        try:
            yield due
        finally:
            with self.lock:
                self.streaming -= 1
