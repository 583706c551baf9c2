"""The maintenance duties: cron scheduling, the abandoned sweep, pruning, the history (moving
finished rows, keeping its partitions: :mod:`.history`), the jobs waiting for a signal that came
or a deadline that passed, the worker registry, and the jobs table's health
(:mod:`.health`, at its own cadence).

:meth:`Maintenance.run_pass` runs each duty once, every one in a short transaction of its own,
and on its own: one that fails is logged and skips none of the others (:mod:`.failures`).
Any number of replicas may run it at once: every step is safe to run concurrently (row locks,
``SKIP LOCKED``, unique keys).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from ... import sql
from ...model import metrics
from ...model.errors import first_line
from ...model.notices import CancelNotice, DeadNotice, report_cancelled, report_dead
from ...model.registry import Registry
from ...model.specs import QueueSpec
from ...model.states import DeadReason, JobState
from ...sql import audit, awaits, batches, dependencies, doors, job_logs, results, signals
from ...sql.settled import after_rows
from ..worker import IDLE_IN_TRANSACTION_TIMEOUT, LOCK_TIMEOUT, STATEMENT_TIMEOUT
from . import cron
from .failures import DutyRunner
from .health import TableKeeper
from .history import HistoryKeeper

#: Seconds between two prunings of the records that outlive jobs (audit entries, attempt logs,
#: signals, dependency edges): each grows far slower than the jobs table.
RECORDS_PRUNE_EVERY = 60.0
#: How the log names each kind :meth:`Maintenance.prune_records` prunes.
_PRUNED_NAMES = {
    "audit": "audit entries",
    "logs": "attempt logs",
    "signals": "signals",
    "edges": "dependency edges of gone jobs",
}

log = logging.getLogger("workerpool.maintenance")

#: The process type maintenance children register under in ``workerpool_workers.queue``
#: ('@' cannot start a queue name, so it never clashes with one).
MAINTENANCE_TYPE = "@maintenance"
#: Seconds between two samples of the queue depth gauges (metrics on only).
DEPTH_EVERY = 5.0
#: Seconds between two sweeps of open batches (a safety net: see sweep_batches).
BATCH_SWEEP_EVERY = 5.0
#: A waiter row this old belongs to a caller that died waiting (a live one that waits longer
#: loses only its notification, and polls).
WAITER_TTL = 3600.0


class Maintenance:
    """One replica's maintenance duties, run a pass at a time on ``engine``.

    ``registry``: the crons to schedule, the queues to sweep and the ``on_dead`` hooks;
    ``queues``: the queues' settings for this run (default: as declared; ``workerpool run``
    applies the environment's overrides, :mod:`workerpool.process.settings`); ``pooled``: the
    engine goes through PgBouncer in transaction pooling mode; ``read_engine``: a replica's,
    where the depth samples are read (default: ``engine``).
    """

    def __init__(
        self,
        registry: Registry,
        engine: Engine,
        *,
        worker_id: str,
        interval: float | None = None,
        queues: Mapping[str, QueueSpec] | None = None,
        pooled: bool = False,
        read_engine: Engine | None = None,
    ) -> None:
        registry.validate_crons()
        self.registry = registry
        self.engine = engine
        self.read_engine = engine if read_engine is None else read_engine
        self.queues = dict(registry.queues if queues is None else queues)
        self.worker_id = worker_id
        self.settings = registry.maintenance_settings
        self.interval = self.settings.interval if interval is None else interval
        self._registered = False
        self.duties = DutyRunner()  # which duties are failing, and why
        self.table = TableKeeper(engine, pooled=pooled, settings=self.settings)
        self._sampled_at = float("-inf")
        self._swept_batches_at = float("-inf")
        self._result_ttls = {
            name: spec.result_ttl
            for name, spec in registry.tasks.items()
            if spec.result_ttl is not None
        }
        self.history = HistoryKeeper(self._transaction, self.settings, self._result_ttls)
        self._last_batch: int | None = None  # the newest batch the opened counter has seen
        self._swept_dependencies_at = float("-inf")
        self._swept_awaits_at = float("-inf")
        self._records_pruned_at = float("-inf")
        self._edges_after = 0  # where the next pass's scan of dependency edges starts
        #: Waiting jobs the dependency sweep had to resolve (0 unless a release was missed).
        self.repaired_dependents = 0

    # -- the pass ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, engine: Engine | None = None) -> Iterator[Connection]:
        """A short transaction with the worker's time limits: a lock or a stuck statement errors
        out (and the pass is retried) instead of hanging until the supervisor's hang kill."""
        with (engine or self.engine).begin() as conn:
            sql.bound_transaction(
                conn,
                statement_timeout=STATEMENT_TIMEOUT,
                lock_timeout=LOCK_TIMEOUT,
                idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT,
            )
            yield conn

    def run_pass(self) -> None:
        """One round of every duty, each on its own: one that fails is logged with its name and
        cause and skips none of the others (:mod:`.failures`). Raises if the database is
        unreachable (no heartbeat then)."""
        for name, duty in (
            ("registry", self.keep_registered),
            ("cron", self.schedule_crons),
            ("abandoned", self.sweep_abandoned),
            ("prune", self.prune_finished),
            ("history", self.keep_history),
            ("batches", self.sweep_batches),
            ("dependencies", self.sweep_dependencies),
            ("signals", self.sweep_signals),
            ("awaits", self.sweep_awaits),
            ("workers", self.prune_workers),
            ("rate_counts", self.prune_rate_counts),
            ("records", self.prune_records),
            # every HEALTH_INTERVAL, not every pass; VACUUM runs on its own thread
            ("table_health", self.table.tick),
            ("depth", self.sample_depth),
        ):
            self.duties.run(name, duty)

    def keep_registered(self) -> None:
        """Announce this process in ``workerpool_workers`` and keep its ``last_seen`` fresh."""
        with self._transaction() as conn:
            if self._registered and sql.beat_worker(conn, self.worker_id):
                return
            sql.register_worker(
                conn,
                self.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                queue=MAINTENANCE_TYPE,
                tasks={},
            )
        self._registered = True

    def schedule_crons(self) -> list[tuple[str, cron.Decision]]:
        """Every pass, also with no cron declared: schedules may be added at run time."""
        with self._transaction() as conn:
            return cron.schedule(self.registry, conn)

    def sweep_abandoned(self) -> list[DeadNotice]:
        """Stale leases with no attempts left: ``dead/abandoned`` when the lost worker held only
        that job (each reported), a suspect with its attempt back when it held others."""
        notices: list[DeadNotice] = []
        for name, spec in self.queues.items():
            with self._transaction() as conn:
                rows, cancelled = sql.sweep_abandoned(conn, name, spec.stale_after)
            dead = [row for row in rows if row.state == JobState.DEAD]
            notices += report_dead(self.registry.on_dead, dead, reason=DeadReason.ABANDONED)
            self._report_cancelled(cancelled)
        return notices

    def prune_finished(self) -> int:
        """Delete done/cancelled rows older than the retention, a batch per transaction."""
        settings, deleted = self.settings, 0
        for _ in range(settings.prune_batches_per_pass):
            with self._transaction() as conn:
                count = sql.prune_finished(
                    conn, settings.retention, settings.prune_batch, self._result_ttls
                )
            deleted += count
            if count < settings.prune_batch:
                break
        if deleted:
            log.info(
                "pruned %d finished jobs", deleted, extra={"event": "jobs_pruned", "count": deleted}
            )
        return deleted

    def prune_records(self) -> int:
        """Every RECORDS_PRUNE_EVERY seconds, what outlives the jobs by a bounded time: audit
        entries older than ``audit_retention``; attempt logs (a dead job's stay while it does)
        and signals older than ``retention``; the edges of jobs that are gone."""
        if time.monotonic() < self._records_pruned_at + RECORDS_PRUNE_EVERY:
            return 0
        self._records_pruned_at = time.monotonic()
        limit, retention = self.settings.prune_batch, self.settings.retention
        with self._transaction() as conn:
            pruned = {
                "audit": audit.prune_audit(conn, self.settings.audit_retention, limit),
                "logs": job_logs.prune_logs(conn, retention, limit),
                "signals": signals.prune(conn, retention, limit),
            }
            self._edges_after, pruned["edges"] = dependencies.prune_orphans(
                conn, self._edges_after, limit
            )
        for kind, count in pruned.items():
            if count:
                log.info(
                    "pruned %d %s",
                    count,
                    _PRUNED_NAMES[kind],
                    extra={"event": f"{kind}_pruned", "count": count},
                )
        return sum(pruned.values())

    def keep_history(self) -> int:
        """Keep the history's partitions and move finished rows into it (:mod:`.history`)."""
        return self.history.tick()

    def sweep_batches(self) -> list[batches.Fired]:
        """Every BATCH_SWEEP_EVERY seconds: finish open batches whose members have all ended
        (the outcome of the last one finishes its batch in its own transaction, so this fires
        nothing unless that path was missed: logged at error level when it does); then prune
        finished batches past the retention, and waiter rows of callers that died waiting."""
        now = time.monotonic()
        if now - self._swept_batches_at < BATCH_SWEEP_EVERY:
            return []
        self._swept_batches_at = now
        with self._transaction() as conn:
            fired = batches.sweep(conn)
        metrics.record.batches_finished(fired, "sweep")
        metrics.record.flush()
        for batch in fired:
            log.error(
                "batch %s finished by the maintenance sweep, not by its last member's outcome",
                batch.batch_id,
                extra={
                    "event": "batch_swept",
                    "batch_id": batch.batch_id,
                    "outcome": batch.outcome,
                },
            )
        with self._transaction() as conn:
            batches.prune(conn, self.settings.retention, self.settings.prune_batch)
            results.prune_waiters(conn, WAITER_TTL)
        return fired

    def sweep_dependencies(self) -> int:
        """Every BATCH_SWEEP_EVERY seconds: resolve waiting jobs whose parents have all ended
        (their parents' final write releases them in its own transaction, so this finds
        nothing unless that path was missed: logged at error level when it does). Returns the
        jobs it made due or cancelled."""
        now = time.monotonic()
        if now - self._swept_dependencies_at < BATCH_SWEEP_EVERY:
            return 0
        self._swept_dependencies_at = now
        with self._transaction() as conn:
            swept = dependencies.sweep(conn)
            # their waiters, batches and own dependents
            cancelled = after_rows(conn, swept.cancelled).cancelled
        self._report_cancelled(
            [dependencies.cancel_notice(row) for row in swept.cancelled] + cancelled
        )
        repaired = swept.due + len(swept.cancelled)
        if repaired:
            self.repaired_dependents += repaired
            log.error(
                "%d waiting jobs released by the maintenance sweep, not by their parents'"
                " final write (%d made due, %d cancelled)",
                repaired,
                swept.due,
                len(swept.cancelled),
                extra={
                    "event": "dependents_swept",
                    "due": swept.due,
                    "cancelled": len(swept.cancelled),
                },
            )
        return repaired

    def _report_cancelled(self, notices: list[CancelNotice]) -> None:
        """Dependents cancelled because a parent failed: cancels like any other."""
        for notice in notices:
            metrics.record.finished(notice.queue, notice.task, "cancelled", None)
        if notices:
            metrics.record.flush()
            report_cancelled(self.registry.on_cancel, notices)

    def sweep_signals(self) -> dict[str, int]:
        """Jobs waiting for a signal that was sent (its wake-up was missed: latency, never a
        stuck job) or whose wait's deadline passed (their ``wait_for`` raises TimeoutError):
        due again now."""
        with self._transaction() as conn:
            woken = signals.sweep(conn)
        if woken:
            log.info(
                "made %d waiting jobs due (signal sent or deadline passed)",
                sum(woken.values()),
                extra={"event": "signal_waiters_swept", "count": sum(woken.values())},
            )
        return woken

    def sweep_awaits(self) -> dict[str, int]:
        """Every BATCH_SWEEP_EVERY seconds: jobs awaiting another job (``job.wait_for_job``)
        past their deadline, due again now; their handler raises TimeoutError. (The awaited
        job's final write wakes the others in its own transaction; a missed one is
        :meth:`sweep_dependencies`'.) Its read walks every waiting job, like that sweep, so it
        runs as seldom: a deadline is met a few seconds late at most."""
        now = time.monotonic()
        if now - self._swept_awaits_at < BATCH_SWEEP_EVERY:
            return {}
        self._swept_awaits_at = now
        with self._transaction() as conn:
            woken = awaits.sweep(conn)
        if woken:
            log.info(
                "made %d awaiting jobs due (deadline passed)",
                sum(woken.values()),
                extra={"event": "awaits_swept", "count": sum(woken.values())},
            )
        return woken

    def prune_workers(self) -> list[str]:
        with self._transaction() as conn:
            gone = sql.prune_workers(conn, self.settings.worker_ttl)
        for worker in gone:
            log.info(
                "pruned worker %s (not seen for %ss)",
                worker,
                self.settings.worker_ttl,
                extra={"event": "worker_pruned", "worker": worker},
            )
        return gone

    def prune_rate_counts(self) -> int:
        """The rate limits' counts of windows no claim reads any more (a limit removed)."""
        with self._transaction() as conn:
            return sql.prune_rate_counts(conn)

    def sample_depth(self) -> None:
        """With metrics on, every DEPTH_EVERY seconds: one bounded query for the depth gauges."""
        now = time.monotonic()
        if not metrics.record.enabled or now - self._sampled_at < DEPTH_EVERY:
            return
        self._sampled_at = now
        try:
            with self._transaction(self.read_engine) as conn:
                samples = sql.queue_depths(conn, list(self.queues))
                bounds = doors.read_bounds(conn)
                open_batches = batches.count_open(conn)
                opened, self._last_batch = batches.opened_after(conn, self._last_batch)
        except OperationalError as exc:
            if self.read_engine is self.engine:
                raise
            # a replica down must not fail the pass: the duties on the primary are what matter
            log.warning(
                "depth sample skipped: the read replica failed: %s",
                first_line(exc),
                extra={"event": "replica_sample_failed"},
            )
            return
        metrics.record.depth(samples)
        metrics.record.bounds(bounds)
        metrics.record.batches_open(open_batches)
        metrics.record.batches_opened(opened)

    def close(self) -> None:
        """Remove this process from the registry (a clean exit)."""
        self.table.close()
        if self._registered:
            with self._transaction() as conn:
                sql.unregister_worker(conn, self.worker_id)
            self._registered = False
