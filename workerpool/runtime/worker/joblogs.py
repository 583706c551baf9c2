"""Capturing a handler's log records per attempt (a queue's ``capture_logs=True``).

One :class:`CaptureHandler` on the root logger sends each record to the attempt running in the
current context: the executor sets :data:`CURRENT` around the handler call on its thread, and
an ``async def`` handler's task inherits it (asyncio copies the context of the thread that
schedules it). A thread the handler starts itself does not inherit it: its records are not
captured. Only records your logging configuration lets through reach the root logger (the
``--log-level`` of ``workerpool run``).

Each attempt keeps at most :data:`MAX_RECORDS` records and :data:`MAX_BYTES` of messages; what
the bound leaves out is counted (``dropped``) and shown as truncated. Every text of a record is
made storable as it is kept (:func:`~workerpool.model.attempt.storable`): a NUL or a lone
surrogate in one must not fail the write of the attempt's outcome, which carries the records.
"""

from __future__ import annotations

import json
import logging
import threading
from contextvars import ContextVar
from datetime import UTC, datetime

from ...model.attempt import storable

MAX_RECORDS = 200
MAX_BYTES = 64 * 1024
#: A single message is cut to this many characters.
MAX_MESSAGE = 2000


class AttemptLog:
    """The records of one attempt, bounded; appended to from the handler's threads."""

    def __init__(self) -> None:
        self.records: list[dict[str, str]] = []
        self.size = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def add(self, record: logging.LogRecord, message: str) -> None:
        message = storable(message)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        entry = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": storable(str(record.levelname)),
            "logger": storable(str(record.name)),
            "message": message,
        }
        cost = len(message.encode("utf-8")) + len(entry["logger"]) + 40
        with self._lock:
            if len(self.records) >= MAX_RECORDS or self.size + cost > MAX_BYTES:
                self.dropped += 1
                return
            self.records.append(entry)
            self.size += cost

    def as_json(self) -> str:
        with self._lock:
            return json.dumps(self.records, ensure_ascii=False)

    def __bool__(self) -> bool:
        return bool(self.records) or self.dropped > 0


#: The attempt whose handler runs in this context (None elsewhere).
CURRENT: ContextVar[AttemptLog | None] = ContextVar("workerpool_attempt_log", default=None)


class CaptureHandler(logging.Handler):
    """Appends each record to the attempt running in the current context, if any."""

    def emit(self, record: logging.LogRecord) -> None:
        attempt = CURRENT.get()
        if attempt is None:
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            attempt.add(record, message)
        except Exception:
            self.handleError(record)


_installed: CaptureHandler | None = None
_install_lock = threading.Lock()


def install() -> None:
    """Put the capture handler on the root logger (once per process)."""
    global _installed
    with _install_lock:
        if _installed is None:
            _installed = CaptureHandler()
            logging.getLogger().addHandler(_installed)
