"""The releaser: a short-lived child the supervisor forks as it exits, for claims left behind.

Forked only if children died during shutdown holding claims (SIGKILLed at the deadline, crashed,
FATAL) or orphans were left that no replacement took. It releases every row still
``processing`` under those worker ids (``pending`` with the attempt spent, or ``dead/abandoned``
when exhausted, each with a ``WorkerLost`` entry) in one bounded transaction, reports
``r <rows>\\n`` to the parent, and exits 0 (1 on a database error: the stale recovery
takes the rows later). No heartbeat file, no signal handling beyond the defaults: the parent
SIGKILLs it at its deadline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Any

from .. import sql
from ..model import exitcodes
from ..model.errors import first_line
from ..ops.dead import DeadNotice, report_dead
from ..process import oslayer
from ..sql import db
from .release import Released, release_orphans

log = logging.getLogger("workerpool.releaser")

#: The releaser's limits: it must be done well inside the supervisor's RELEASE_MARGIN.
CONNECT_TIMEOUT = 2  # whole seconds (libpq)
STATEMENT_TIMEOUT = 2.0


class Releaser:
    """Built in the supervisor before the fork; :meth:`start` runs in the forked process."""

    def __init__(self, pool: Any, worker_ids: tuple[str, ...], *, parent_pid: int,
                 close_fds: tuple[int, ...] = ()) -> None:
        self.pool = pool
        self.worker_ids = worker_ids
        self.parent_pid = parent_pid
        self.close_fds = close_fds

    def start(self, report_fd: int) -> int:
        """Become the releaser process; return its exit code."""
        self._become_process()
        try:
            released = self._release()
        except Exception as exc:  # database down, timeout: the stale recovery takes them later
            log.warning("releaser could not release %d dead worker(s): %s", len(self.worker_ids),
                        first_line(exc), extra={"event": "releaser_error"})
            return exitcodes.FAILURE
        with contextlib.suppress(OSError):
            os.write(report_fd, f"r {released.rows}\n".encode())
        self._report_dead(released.dead)
        return exitcodes.OK

    def _become_process(self) -> None:
        oslayer.shed_parent_state("workerpool: releaser", self.close_fds)
        oslayer.set_parent_death_signal(signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, oslayer.HANDLED_SIGNALS)
        self.pool.forget_engine()

    def _release(self) -> Released:
        engine = db.create(self.pool.url, application_name="workerpool releaser", pool_size=1,
                           connect_timeout=CONNECT_TIMEOUT)
        try:
            with engine.begin() as conn:
                sql.bound_transaction(conn, statement_timeout=STATEMENT_TIMEOUT,
                                          lock_timeout=STATEMENT_TIMEOUT,
                                          idle_timeout=STATEMENT_TIMEOUT)
                released = release_orphans(conn, self.worker_ids)
        finally:
            engine.dispose()
        return released

    def _report_dead(self, dead: list[DeadNotice]) -> None:
        """Exhausted rows went dead/abandoned: logged once at error level, on_dead hooks run."""
        try:
            report_dead(self.pool, dead)
        except Exception:
            log.exception("reporting dead jobs failed", extra={"event": "report_dead_failed"})
