"""What ``job.progress`` accepts, and how often it writes.

A report is a fraction (0..1) or a JSON object (``{"done": 4, "of": 10}``) of at most
:data:`PROGRESS_LIMIT` bytes; anything else raises :class:`InvalidProgress` in the handler,
before anything is written. :class:`Throttle` decides which reports reach the database: the
first at once, then at most one per :data:`PROGRESS_INTERVAL` seconds, and the last one held
back is written when the handler returns (:meth:`Throttle.last`).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from .errors import InvalidProgress, PayloadError
from .payload import dumps

#: Bytes a progress object may take as JSON.
PROGRESS_LIMIT = 4096
#: Seconds between two progress writes of one job.
PROGRESS_INTERVAL = 1.0


def progress_json(value: Any) -> str:
    """``value`` as JSON text, or InvalidProgress naming what is wrong."""
    if isinstance(value, bool) or value is None:
        raise InvalidProgress(f"progress is a fraction within 0..1 or a JSON object, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or not 0 <= value <= 1:
            raise InvalidProgress(f"a progress fraction is within 0..1, got {value!r}")
        return repr(float(value))
    if not isinstance(value, dict):
        raise InvalidProgress(
            f"progress is a fraction within 0..1 or a JSON object, got {type(value).__name__}"
        )
    try:
        return dumps(value, limit=PROGRESS_LIMIT, what="progress")
    except PayloadError as exc:
        raise InvalidProgress(str(exc)) from None


class Throttle:
    """One job's progress reports: which to write now, and the last one still unwritten."""

    def __init__(self, interval: float = PROGRESS_INTERVAL) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._written_at: float | None = None
        self._held: str | None = None

    def offer(self, text: str) -> bool:
        """True: write ``text`` now. False: it is held until the interval passes or the end."""
        with self._lock:
            now = time.monotonic()
            if self._written_at is not None and now - self._written_at < self.interval:
                self._held = text
                return False
            self._written_at, self._held = now, None
            return True

    def last(self) -> str | None:
        """The report held back, once (the handler is done: write it)."""
        with self._lock:
            held, self._held = self._held, None
            return held
