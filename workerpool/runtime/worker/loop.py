"""The worker's main loop: one pass after another until a stop, then the drain.

Each pass:
  1. registers the process and releases its dead predecessors' claims (once),
  2. renews the leases that are due (first thing after a database outage, before any claim),
     and acts on an operator's requests: cancels of the jobs it holds (by notification, or
     read back where there is none), and whether its queue is paused (read once per poll
     interval, or at once on a notification),
  3. fails jobs that overran their ``timeout`` (and asks for a recycle if one will not stop),
  4. writes finished outcomes in one batch, fenced on each lease,
  5. claims into its free room (``concurrency`` handler slots plus a buffer: ``prefetch``, or by
     default as many jobs as the handlers finish during one claim's round trip) when a handler
     slot is idle or at least half the buffer has been used up;
     otherwise outcomes wait, at most OUTCOME_FLUSH seconds, to ride with the next claim,
  6. reports a tick (the heartbeat) if the pass reached the database,
then waits for a notification, a finished job that left the buffer low, a stop request or the
next deadline (poll interval, lease renewal, job timeout, outcome flush), whichever comes first.

On drain, jobs no handler has started are given back at once (``pending``, attempt refunded,
``run_at`` kept, no error entry: nothing ran); running ones get ``drain_timeout`` to finish and
are given back after it. While the database is unreachable it retries with capped backoff,
keeps handlers running, keeps their outcomes, and sends no tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.engine import URL

from ...model import exitcodes, metrics
from ...model.attempt import CANCELLED, Outcome, interrupted
from ...model.doors import task_rows
from ...model.job import new_worker_id
from ...model.registry import Registry
from ...model.specs import QueueSpec, TaskSpec
from ...model.states import OutcomeKind
from .claims import Claims
from .control import Cancels, Pause
from .counters import Counters
from .executor import Executor
from .inflight import Flights, FlightState, InFlight, Step
from .leases import Leases
from .listener import Listener
from .outcomes import OUTCOME_FLUSH, Outcomes
from .session import DATABASE_ERRORS, Session
from .timeouts import Timeouts

log = logging.getLogger("workerpool.worker")

RELEASE_TRIES = 3  # attempts to release unfinished jobs at the drain deadline


class Worker:
    """Claims and runs the jobs of one queue until asked to stop, then drains.

    ``registry``: the application's declarations (the queue's tasks, the hooks); ``url``: the
    database, on which it makes its own engine once running. ``spec`` replaces
    ``registry.queue_spec(queue)``: the settings loaded for this run (``workerpool run`` applies
    the environment's overrides, :mod:`workerpool.process.settings`).
    ``pooled``: its connections go through PgBouncer in transaction pooling mode (no LISTEN, no
    session state).
    """

    def __init__(
        self,
        registry: Registry,
        url: URL,
        queue: str,
        *,
        spec: QueueSpec | None = None,
        worker_id: str | None = None,
        on_tick: Callable[[], None] | None = None,
        parent_alive: Callable[[], bool] | None = None,
        orphans: tuple[str, ...] = (),
        on_claim: Callable[[], None] | None = None,
        pooled: bool = False,
    ) -> None:
        self.registry = registry
        self.spec: QueueSpec = spec if spec is not None else registry.queue_spec(queue)
        self.queue = queue
        self.id = worker_id or new_worker_id()
        self.on_tick = on_tick or (lambda: None)
        self.parent_alive = parent_alive or (lambda: True)
        self.task_versions = registry.task_versions(queue)
        self.tasks: dict[str, TaskSpec] = registry.queue_tasks(queue)
        self.stale_after = self.spec.stale_after
        self.counters = Counters()
        self._wake = threading.Event()
        self._next_wake = 0.0  # monotonic: when the main loop wakes at the latest
        self._stopping = threading.Event()
        self._stop_requested_at: float | None = None
        self._stop_now = threading.Event()
        self._unreleased = False  # the drain could not give its jobs back
        self._listener: Listener | None = None
        self.flights = Flights()
        self.session = Session(url, queue, self.spec.concurrency, pooled=pooled)
        self.outcomes = Outcomes(
            queue,
            self.id,
            self.flights,
            self.counters,
            on_dead=registry.on_dead,
            on_cancel=registry.on_cancel,
        )
        self.timeouts = Timeouts(self.flights, self.outcomes, self.counters)
        self.cancels = Cancels(self.flights, self.outcomes, self.spec.cancel_grace)
        self.pause = Pause(self.session, queue, self.spec.poll_interval)
        self.executor = Executor(
            queue,
            self.id,
            self.spec.concurrency,
            self.session,
            payload_limit=registry.payload_limit,
            began=self._handler_began,
            returned=self._handler_returned,
            capture_logs=self.spec.capture_logs,
        )
        self.claims = Claims(
            self.spec,
            queue,
            self.id,
            tasks=self.tasks,
            task_versions=self.task_versions,
            session=self.session,
            flights=self.flights,
            outcomes=self.outcomes,
            executor=self.executor,
            counters=self.counters,
            closed=lambda: self._stopping.is_set() or self.timeouts.recycle or self.pause.paused,
            on_claim=on_claim or (lambda: None),
        )
        self.claims.door_rows = task_rows(registry, queue)
        if self.spec.max_pending is not None:
            self.claims.door_bounds = {queue: self.spec.max_pending}
        self.leases = Leases(
            self.session,
            self.flights,
            self.counters,
            worker_id=self.id,
            queue=queue,
            task_versions=self.task_versions,
            stale_after=self.stale_after,
            orphans=orphans,
            capacity=self.spec.concurrency + self.claims.buffer.most,
        )
        self.leases.on_cancelled = self.cancels.ask
        self.leases.on_dependents_cancelled = self.outcomes.report_dependents_cancelled

    # -- control (thread- and signal-safe) -----------------------------------------------------

    def stop(self) -> None:
        """Stop claiming and drain (idempotent: a second call changes nothing).

        The drain's deadline counts from the first call, not from when the main loop notices.
        """
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stopping.set()
        self._wake.set()

    def stop_now(self) -> None:
        """Stop without waiting for in-flight jobs; they are released."""
        self._stop_now.set()
        self.stop()

    @property
    def in_flight(self) -> int:
        return len(self.flights)

    @property
    def listener(self) -> Listener | None:
        return self._listener

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals (also the workers registry's beat)."""
        return self.leases.every

    # -- the main loop -------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; drain; return the exit code for the supervisor."""
        log.info(
            "worker %s started on queue %s",
            self.id,
            self.queue,
            extra={"event": "worker_started", "queue": self.queue, "worker": self.id},
        )
        self._open()
        try:
            while not self._stopping.is_set():
                self._pass()
                if not self.parent_alive():
                    log.warning("parent is gone; draining", extra={"event": "parent_gone"})
                    self.stop()
                    break
                self._wait()
            self._drain()
        finally:
            self._close()
        if self._unreleased:  # non-zero: the supervisor releases this worker's claims
            return exitcodes.UNRELEASED
        return exitcodes.RECYCLE if self.timeouts.recycle else exitcodes.OK

    def _pass(self, *, claiming: bool = True) -> None:
        self.session.reached_db = False
        try:
            self.outcomes.report_released(self.leases.register_once())
            self.leases.renew_if_due()
            self._control(claiming)
            self.outcomes.collect()
            if self.timeouts.enforce():
                self._withdraw_unstarted()  # a process to replace starts nothing more
            if self.timeouts.recycle and not self.flights.running():
                self.stop()  # its other jobs have finished: now it may go
            if claiming and self.claims.due():
                self.claims.claim_and_write_outcomes()
            elif not claiming or self.outcomes.due(self.claims.buffer.size):
                self.outcomes.write(self.session)
            self.leases.beat_if_quiet(self.spec.poll_interval)
        except DATABASE_ERRORS as exc:
            self._database_failed(exc)
            return
        self.session.succeeded()
        metrics.record.in_flight(self.queue, len(self.flights))
        metrics.record.flush()  # what this pass committed, to the metrics files
        if self.session.reached_db:
            self.on_tick()

    def _control(self, claiming: bool) -> None:
        """An operator's requests: cancels of held jobs, and whether the queue is paused."""
        if not self._listening():
            self.cancels.check_if_due(self.session, self.id, self.spec.poll_interval)
        self.cancels.apply()
        if claiming:
            self.pause.refresh_if_due()

    def _listening(self) -> bool:
        return self._listener is not None and self._listener.connected.is_set()

    def _wait(self, until: float | None = None) -> None:
        """Sleep until woken or the next thing is due; during an outage, the backoff delay."""
        now = time.monotonic()
        backoff = self.session.backoff
        if backoff.failures:
            # Finished handlers must not turn the backoff into a tight reconnect loop.
            if until is None:
                self._stopping.wait(backoff.delay)
            else:
                self._stop_now.wait(min(backoff.delay, max(0.0, until - now)))
            return
        due = [self.spec.poll_interval, self.spec.hang_timeout / 4, self.leases.next_due() - now]
        due += [deadline - now for deadline in self.timeouts.deadlines()]
        if until is not None:
            due.append(until - now)
        if self.claims.buffer.size and (self.flights or self.outcomes.unwritten):
            due.append(OUTCOME_FLUSH)  # handlers do not wake the loop while the buffer is deep
        timeout = max(0.0, min(due))
        self._next_wake = now + timeout
        if not self._wake.wait(timeout):
            metrics.record.woke(self.queue, "poll")
        self._wake.clear()

    def _database_failed(self, exc: BaseException) -> None:
        self.counters.db_errors += 1
        self.leases.renew_soon()
        self.session.failed(exc)

    # -- called on handler threads -------------------------------------------------------------

    def _handler_began(self, flight: InFlight) -> None:
        if flight.deadline is not None and flight.deadline < self._next_wake:
            self._wake.set()  # the main loop must enforce it before it planned to wake

    def _handler_returned(self, flight: InFlight, outcome: Outcome | None) -> None:
        self.outcomes.results.put((flight, outcome))
        if (
            not self.claims.buffer.size
            or outcome is None
            or self.executor.waiting() < self.claims.refill
        ):
            self._wake.set()  # the buffer runs low (or no buffer): time to claim

    # -- start and shutdown --------------------------------------------------------------------

    def _open(self) -> None:
        self.session.open()
        self.executor.start()
        if self.spec.notify and self.registry.notify and not self.session.pooled:
            self._listener = Listener(
                self.session.url,
                self.queue,
                self._wake,
                worker_id=self.id,
                on_cancel=self.cancels.ask,
                on_pause=self.pause.changed,
            )
            self._listener.start()

    def _drain(self) -> None:
        """Give back buffered jobs; let running ones finish within drain_timeout; release the
        rest."""
        self._withdraw_unstarted()
        deadline = (self._stop_requested_at or time.monotonic()) + self.spec.drain_timeout
        if self.flights.running():
            log.info(
                "draining %d job(s)",
                len(self.flights.running()),
                extra={"event": "drain_started", "queue": self.queue},
            )
        while (
            self.flights.running() and not self._stop_now.is_set() and time.monotonic() < deadline
        ):
            self._pass(claiming=False)
            self._wait(until=deadline)
        if self.flights or self.outcomes.unwritten:
            self._pass(claiming=False)  # write what finished meanwhile
        self._release_unfinished()
        self._give_back_unheld()

    def _give_back_unheld(self) -> None:
        """Rows a claim whose reply was lost may have taken: given back now, or by the
        supervisor (a non-zero exit), never left to go stale. After a failed release that exit is
        already due: the supervisor's release then attributes every row, the interrupted ones
        with their history, so nothing is given back here without it."""
        if self._unreleased:
            return
        try:
            self.claims.give_back_unheld()
        except DATABASE_ERRORS as exc:
            self._database_failed(exc)
            self._unreleased = True

    def _withdraw_unstarted(self) -> None:
        """Give back at once every buffered job no handler has started."""
        taken = [
            flight
            for flight in self.flights
            if flight.transition(Step.WITHDRAW) is FlightState.BUFFERED
        ]
        if not taken:
            return
        for flight in taken:
            self.outcomes.add(flight, Outcome(OutcomeKind.UNSTARTED))
        log.info(
            "giving back %d prefetched job(s) no handler started",
            len(taken),
            extra={"event": "prefetch_returned", "queue": self.queue, "count": len(taken)},
        )

    def _release_unfinished(self) -> None:
        """Give back what is still running: pending now, attempt refunded, checkpoint kept."""
        left = self.flights.running()
        if not left and not self.outcomes.unwritten:
            return
        reason = "worker stopped now" if self._stop_now.is_set() else "drain timeout"
        for flight in left:  # a cancelled one ends cancelled, never back in the queue
            self.outcomes.add(
                flight,
                CANCELLED
                if flight.cancel_requested
                else interrupted(flight.lease, f"{reason}: worker shutting down"),
            )
        for attempt in range(RELEASE_TRIES):
            try:
                self.outcomes.write(self.session)
                break
            except DATABASE_ERRORS as exc:
                self._database_failed(exc)
                time.sleep(0.2 * (attempt + 1))
        else:
            self._unreleased = True
            log.error(
                "could not release %d job(s); exiting %d so the supervisor releases them",
                len(left),
                exitcodes.UNRELEASED,
                extra={"event": "release_failed", "queue": self.queue},
            )
        if left:
            self.counters.released += len(left)
            log.warning(
                "released %d unfinished job(s) at the drain deadline",
                len(left),
                extra={"event": "drain_released", "queue": self.queue, "count": len(left)},
            )
        for flight in left:
            self.flights.forget(flight)

    def _close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener.join(3)
        try:
            if self.session.engine is not None:
                self.leases.unregister()
        except DATABASE_ERRORS:  # the database may be gone; the row is pruned later
            pass
        self.executor.shutdown()
        self.session.close()
        metrics.record.in_flight(self.queue, len(self.flights))
        metrics.record.flush()  # the drain's last outcomes
        log.info(
            "worker %s stopped",
            self.id,
            extra={"event": "worker_stopped", "queue": self.queue, "worker": self.id},
        )
