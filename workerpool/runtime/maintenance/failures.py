"""A maintenance duty's failure, kept to that duty.

Each duty of a pass runs on its own (:meth:`DutyRunner.run`): one that fails (a permission the role
lacks, a lock timeout, a bug) is logged with its name and cause, and the others still run. Only
a database that cannot be reached ends the pass (:func:`unreachable`): every other duty would
fail the same way, and the pass then sends no heartbeat, so a child cut off from the database
goes stale and is replaced.

A duty that keeps failing with the same cause is logged when it starts, then every
:data:`REPEAT_EVERY` seconds, and once more when it recovers: a pass runs every second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg
from sqlalchemy.exc import DBAPIError

from ...model.errors import first_line

log = logging.getLogger("workerpool.maintenance")

#: Seconds between two log lines of a duty failing with the same cause.
REPEAT_EVERY = 300.0


def unreachable(exc: BaseException) -> bool:
    """The database did not answer (a connection lost or refused, no SQLSTATE): not one duty's
    fault. An error the server answered with (permission, lock timeout, constraint) is."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    return isinstance(exc, psycopg.Error) and exc.sqlstate is None


class DutyRunner:
    """Runs each duty of a pass on its own and remembers which are failing, and why."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failing: dict[str, tuple[str, float]] = {}  # duty -> (cause, when last logged)

    def run(self, name: str, duty: Callable[[], object]) -> bool:
        """Run ``duty``; False if it failed (logged). Re-raises when the database is gone."""
        try:
            duty()
        except Exception as exc:
            if unreachable(exc):
                raise
            self._failed(name, exc)
            return False
        if self.failing.pop(name, None) is not None:
            log.info(
                "maintenance duty %s works again",
                name,
                extra={"event": "duty_recovered", "duty": name},
            )
        return True

    def _failed(self, name: str, exc: Exception) -> None:
        cause = f"{type(exc).__name__}: {first_line(exc)}"
        previous = self.failing.get(name)
        now = self.clock()
        if previous is not None and previous[0] == cause and now - previous[1] < REPEAT_EVERY:
            return
        self.failing[name] = (cause, now)
        database = isinstance(exc, DBAPIError | psycopg.Error)
        log.error(
            "maintenance duty %s failed (the others ran): %s",
            name,
            cause,
            exc_info=not database,  # a bug's traceback; a database's answer is its cause
            extra={"event": "duty_failed", "duty": name, "cause": cause},
        )
