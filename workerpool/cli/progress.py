"""A small stderr progress bar for bulk operations (one line, redrawn in place).

Drawn after each batch when stderr is a terminal; forced on (one line per update, for logs) or
off with ``WORKERPOOL_PROGRESS=1`` / ``0``.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ..process import settings

WIDTH = 30


class ProgressBar:
    """Callable as ``bar(done, total)``; ``close()`` ends the line."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        forced = settings.progress()
        self.enabled = forced == "1" or (forced != "0" and self.stream.isatty())
        self.in_place = self.stream.isatty()
        self.started = time.monotonic()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        fraction = min(1.0, done / total)
        filled = int(WIDTH * fraction)
        rate = done / max(time.monotonic() - self.started, 1e-6)
        line = (
            f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] "
            f"{done}/{total} ({fraction:.0%}, {rate:.0f} rows/s)"
        )
        self.stream.write(("\r" + line) if self.in_place else line + "\n")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn and self.in_place:
            self.stream.write("\n")
            self.stream.flush()
