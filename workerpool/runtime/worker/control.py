"""An operator's requests reaching a worker: cancel a job it holds, pause its queue.

Both arrive two ways: a notification (the listener calls :meth:`Cancels.ask` or
:meth:`Pause.changed` and wakes the loop) and reading the database (lease renewal reports the
held jobs with a cancel request; the queue's row is read once per poll interval), so they also
reach a worker behind PgBouncer, which gets no notifications. Only the main loop acts on them.
"""

from __future__ import annotations

import logging
import math
import queue as queue_module
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager

from sqlalchemy import Connection

from ... import sql
from ...model.attempt import CANCELLED
from .inflight import Flights, FlightState, InFlight, Step
from .outcomes import Outcomes
from .session import Session

log = logging.getLogger("workerpool.worker")


class Cancels:
    """Stops the held jobs an operator cancelled: a buffered one at once, a running one by
    setting its ``job.cancelled`` (and cancelling an async handler's task); the timeouts give
    it ``grace`` seconds."""

    def __init__(self, flights: Flights, outcomes: Outcomes, grace: float) -> None:
        self.flights, self.outcomes, self.grace = flights, outcomes, grace
        self._asked: queue_module.SimpleQueue[int] = queue_module.SimpleQueue()
        self.last_check = time.monotonic()

    def ask(self, ids: Iterable[int]) -> None:
        """Any thread: these jobs were cancelled (those this worker does not hold are ignored)."""
        for job_id in ids:
            self._asked.put(job_id)

    def apply(self) -> None:
        """Main loop: act on every request that arrived."""
        while True:
            try:
                job_id = self._asked.get_nowait()
            except queue_module.Empty:
                return
            flight = self.flights.get(job_id)
            if flight is not None and not flight.cancel_requested:
                self._stop(flight)

    def check_if_due(self, session: Session, worker: str, every: float) -> None:
        """Without notifications: read this worker's cancel requests every ``every`` seconds."""
        now = time.monotonic()
        if now - self.last_check < every or not self.flights.running():
            return
        with session.transaction() as conn:
            self.ask(sql.requested_cancels(conn, worker))
        self.last_check = now

    def _stop(self, flight: InFlight) -> None:
        job_id = flight.lease.job_id
        if flight.transition(Step.WITHDRAW) is FlightState.BUFFERED:  # never started
            flight.cancel_flag().set()
            self.outcomes.add(flight, CANCELLED)
        elif flight.running:
            flight.cancel_deadline = time.monotonic() + self.grace
            flight.cancel_flag().set()
            future = flight.future  # read after the flag: see Executor._await
            if future is not None:
                future.cancel()
        else:
            return  # its handler returned already: its own outcome stands
        log.info(
            "job %s asked to stop (cancelled)",
            job_id,
            extra={"event": "cancel_received", "job_id": job_id},
        )


class Pause:
    """Whether this worker's queue is paused, read at most once per ``every`` seconds."""

    def __init__(self, session: Session, queue: str, every: float) -> None:
        self.session, self.queue, self.every = session, queue, every
        self.paused = False
        self._read_at = -math.inf
        self._changed = threading.Event()

    def changed(self) -> None:
        """Any thread: a notification says the queue's row changed; read it on the next pass."""
        self._changed.set()

    def refresh_if_due(self) -> None:
        now = time.monotonic()
        if not self._changed.is_set() and now - self._read_at < self.every:
            return
        self._changed.clear()
        with self._connection() as conn:
            paused = sql.is_paused(conn, self.queue)
        if paused != self.paused:
            verb = "paused" if paused else "resumed"
            log.info(
                "queue %s %s: %s",
                self.queue,
                verb,
                "claiming nothing" if paused else "claiming again",
                extra={"event": f"worker_{verb}", "queue": self.queue},
            )
        self.paused, self._read_at = paused, now

    def _connection(self) -> AbstractContextManager[Connection]:
        if self.session.pooled:
            return self.session.transaction()
        return self.session.single_statement()
