"""The maintenance loop: a pass, a tick, a wait of ``interval`` seconds, until stopped.

The one loop for both ways of running maintenance: the supervisor's maintenance child (ticks go
to the parent, which touches the heartbeat file; the loop ends when the parent is gone) and
``python -m workerpool.maintenance`` in the foreground (no parent).

A duty that fails is logged by the pass, which runs the others and ticks (:mod:`.failures`). A
pass that cannot reach the database is logged and retried at the next one, without a tick, so a
child cut off from the database goes stale; any other error ends the loop (the supervisor
restarts a child that crashed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError

from ...model import exitcodes
from ...model.errors import first_line

log = logging.getLogger("workerpool.maintenance")

DATABASE_ERRORS = (OperationalError, DBAPIError, psycopg.Error)


class Duties(Protocol):
    """What the loop runs: :class:`~workerpool.runtime.maintenance.duties.Maintenance`."""

    interval: float

    def run_pass(self) -> None: ...
    def close(self) -> None: ...


def _no_tick() -> None:
    """No parent to tell."""


def _no_parent() -> bool:
    return True


class MaintenanceLoop:
    """``maintenance.run_pass()`` every ``maintenance.interval`` seconds, a tick after each."""

    def __init__(
        self,
        maintenance: Duties,
        *,
        on_tick: Callable[[], None] = _no_tick,
        parent_alive: Callable[[], bool] = _no_parent,
    ) -> None:
        self.maintenance = maintenance
        self.on_tick = on_tick
        self.parent_alive = parent_alive
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    stop_now = stop  # a pass is short: there is no drain to skip

    def run(self) -> int:
        log.info("maintenance started", extra={"event": "worker_started", "worker": "maintenance"})
        while not self._stopping.is_set():
            try:
                self.maintenance.run_pass()
                self.on_tick()
            except DATABASE_ERRORS as exc:
                log.warning(
                    "maintenance pass failed: the database is unreachable (%s: %s)",
                    type(exc).__name__,
                    first_line(exc),
                    extra={"event": "database_error", "worker": "maintenance"},
                )
            if not self.parent_alive():
                log.warning("parent is gone; stopping", extra={"event": "parent_gone"})
                break
            self._stopping.wait(self.maintenance.interval)
        try:
            self.maintenance.close()  # leave the workers registry on a clean stop
        except DATABASE_ERRORS:
            pass  # the row is pruned after worker_ttl anyway
        log.info("maintenance stopped", extra={"event": "worker_stopped", "worker": "maintenance"})
        return exitcodes.OK
