"""Logging for `workerpool run` on stderr, one line per event, event name included: text
(the default), or one JSON object a line for log collectors (``--log-format json``).

The JSON comes from python-json-logger, the maintained standard formatter for ``logging``: a
record's ``extra`` fields (``event``, ``job_id``, ``worker``, ``queue``, ``pid`` ...) become
top-level keys beside ``time``, ``level``, ``logger``, ``process`` and ``message``.
"""

from __future__ import annotations

import logging
import sys

from ..model.errors import ConfigError
from ..process import settings

FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(event)s: %(message)s"
JSON_FIELDS = "{asctime}{levelname}{name}{process}{event}{message}"
JSON_NAMES = {"asctime": "time", "levelname": "level", "name": "logger"}
#: ``auto``: JSON unless stderr is a terminal (a person reading it gets text).
FORMATS = ("text", "json", "auto")


class EventDefault(logging.Filter):
    """Give every record an ``event`` (records from other libraries have none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "event"):
            record.event = "-"
        return True


class OwnOrWarnings(logging.Filter):
    """On stderr: workerpool's records at the run's level, other libraries' from WARNING up (the
    root logger passes more: an application's records at that level, for the attempt logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (
            record.levelno >= logging.WARNING
            or record.name == "workerpool"
            or record.name.startswith("workerpool.")
        )


def resolve_format(given: str | None) -> str:
    """``text`` or ``json``: the option, else ``$WORKERPOOL_LOG_FORMAT``, else text."""
    chosen = (given or settings.log_format() or "text").lower()
    if chosen not in FORMATS:
        raise ConfigError(
            f"log format must be one of {FORMATS} (--log-format or "
            f"${settings.LOG_FORMAT_ENV}), got {chosen!r}"
        )
    if chosen == "auto":
        return "text" if sys.stderr.isatty() else "json"
    return chosen


def formatter(kind: str) -> logging.Formatter:
    if kind == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(JSON_FIELDS, style="{", rename_fields=JSON_NAMES, timestamp=False)
    return logging.Formatter(FORMAT)


def configure_logging(level: str = "INFO", log_format: str | None = None) -> None:
    """Send workerpool's records (and warnings from libraries) to stderr, one line each.

    The root logger is at ``level`` too: a handler's records at that level must reach the
    capture of its attempt's logs (docs/handlers.md), which sits on the root logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(resolve_format(log_format)))
    handler.addFilter(EventDefault())
    handler.addFilter(OwnOrWarnings())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("workerpool").setLevel(level)
