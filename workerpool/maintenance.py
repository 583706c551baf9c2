"""What the maintenance child runs: cron scheduling, the abandoned sweep, pruning, worker registry.

The supervisor forks one ``maintenance`` child per replica; its loop calls
:meth:`Maintenance.run_pass` every :attr:`Maintenance.interval` seconds and counts a pass that
returned as a heartbeat tick. Any number of replicas may run it at once: every step is safe to
run concurrently (row locks, ``SKIP LOCKED``, unique keys).

Without the supervisor: ``python -m workerpool.maintenance APP:POOL`` runs the same loop.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from . import cron, queries
from .dead import DeadNotice, report_dead
from .errors import ConfigError
from .pool import WorkerPool, validate_crons

log = logging.getLogger("workerpool.maintenance")

#: The process type maintenance children register under in ``workerpool_workers.queue``
#: ('@' cannot start a queue name, so it never clashes with one).
MAINTENANCE_TYPE = "@maintenance"

__all__ = ["MAINTENANCE_TYPE", "Maintenance", "report_dead"]


class Maintenance:
    """One replica's maintenance duties, run a pass at a time against ``pool.engine``."""

    def __init__(self, pool: WorkerPool, *, worker_id: str, interval: float | None = None) -> None:
        validate_crons(pool)
        self.pool = pool
        self.worker_id = worker_id
        self.settings = pool.maintenance_settings
        self.interval = self.settings.interval if interval is None else interval
        self._registered = False

    # -- the pass ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A short transaction with the worker's time limits: a lock or a stuck statement errors
        out (and the pass is retried) instead of hanging until the supervisor's hang kill."""
        from .worker import IDLE_IN_TRANSACTION_TIMEOUT, LOCK_TIMEOUT, STATEMENT_TIMEOUT

        with self.pool.engine.begin() as conn:
            queries.bound_transaction(conn, statement_timeout=STATEMENT_TIMEOUT,
                                      lock_timeout=LOCK_TIMEOUT,
                                      idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT)
            yield conn

    def run_pass(self) -> None:
        """One round of every duty. Raises if the database is unreachable (no heartbeat then)."""
        self.keep_registered()
        self.schedule_crons()
        self.sweep_abandoned()
        self.prune_finished()
        self.prune_workers()

    def keep_registered(self) -> None:
        """Announce this process in ``workerpool_workers`` and keep its ``last_seen`` fresh."""
        with self._transaction() as conn:
            if self._registered and queries.beat_worker(conn, self.worker_id):
                return
            queries.register_worker(conn, self.worker_id, host=socket.gethostname(),
                                    pid=os.getpid(), queue=MAINTENANCE_TYPE, tasks={})
        self._registered = True

    def schedule_crons(self) -> list[tuple[str, cron.Decision]]:
        if not self.pool.crons:
            return []
        with self._transaction() as conn:
            return cron.schedule(self.pool, conn)

    def sweep_abandoned(self) -> list[DeadNotice]:
        """Stale leases with no attempts left → ``dead/abandoned`` (DESIGN §3), each reported."""
        notices: list[DeadNotice] = []
        for name in self.pool.queues:
            stale_after = self.pool.stale_after(name)  # the queue's, or $WORKER_CLAIM_STALE_MS
            error = abandoned_error(self.worker_id, stale_after)
            with self._transaction() as conn:
                rows = queries.sweep_abandoned(conn, name, stale_after, error)
            notices += report_dead(self.pool, rows, reason="abandoned", error=error)
        return notices

    def prune_finished(self) -> int:
        """Delete done/cancelled rows older than the retention, a batch per transaction."""
        settings, deleted = self.settings, 0
        for _ in range(settings.prune_batches_per_pass):
            with self._transaction() as conn:
                count = queries.prune_finished(conn, settings.retention, settings.prune_batch)
            deleted += count
            if count < settings.prune_batch:
                break
        if deleted:
            log.info("pruned %d finished jobs", deleted,
                     extra={"event": "jobs_pruned", "count": deleted})
        return deleted

    def prune_workers(self) -> list[str]:
        with self._transaction() as conn:
            gone = queries.prune_workers(conn, self.settings.worker_ttl)
        for worker in gone:
            log.info("pruned worker %s (not seen for %ss)", worker, self.settings.worker_ttl,
                     extra={"event": "worker_pruned", "worker": worker})
        return gone

    def close(self) -> None:
        """Remove this process from the registry (a clean exit)."""
        if self._registered:
            with self._transaction() as conn:
                queries.unregister_worker(conn, self.worker_id)
            self._registered = False


def abandoned_error(worker: str, stale_after: float) -> dict[str, Any]:
    return {
        "worker": worker,
        "type": "Abandoned",
        "message": f"lease stale for more than {stale_after:g}s with no attempts left: "
                   "the worker was lost on the last attempt",
    }


# -- a loop without the supervisor ------------------------------------------------------------


def run_loop(maintenance: Maintenance, stop: threading.Event) -> None:
    """Pass, wait ``interval``, repeat until ``stop`` is set. A failed pass is logged, not fatal."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            maintenance.run_pass()
        except Exception:
            log.exception("maintenance pass failed", extra={"event": "maintenance_failed"})
        stop.wait(max(0.0, maintenance.interval - (time.monotonic() - started)))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workerpool.maintenance APP:POOL``: the maintenance loop in the foreground."""
    from .cli import CliError, load_pool
    from .jobs import new_worker_id

    parser = argparse.ArgumentParser(prog="python -m workerpool.maintenance")
    parser.add_argument("app", metavar="APP:POOL")
    parser.add_argument("--interval", type=float, default=None, help="seconds between passes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        maintenance = Maintenance(load_pool(args.app), worker_id=new_worker_id(),
                                  interval=args.interval)
    except (CliError, ConfigError) as exc:
        print(f"workerpool maintenance: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # the loop thread inherits the mask
    loop = threading.Thread(target=run_loop, args=(maintenance, stop), name="maintenance")
    loop.start()
    signum = signal.sigwait(stop_signals)  # no handler: the signal is taken synchronously here
    log.info("stopping on %s", signal.Signals(signum).name, extra={"event": "maintenance_stop"})
    stop.set()
    loop.join()
    maintenance.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
