"""Logging for `workerpool run`: plain text on stderr, one line per event, event name included."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(event)s: %(message)s"


class EventDefault(logging.Filter):
    """Give every record an ``event`` (records from other libraries have none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "event"):
            record.event = "-"
        return True


def configure_logging(level: str = "INFO") -> None:
    """Send workerpool's records (and warnings from libraries) to stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(EventDefault())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("workerpool").setLevel(level)
