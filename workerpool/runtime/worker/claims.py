"""When to claim, how many, and handing what was claimed to the handler threads.

A worker holds at most ``concurrency`` running jobs plus a buffer of claimed ones (its size:
``prefetch``, or adapted to the handlers' speed, see :mod:`.buffer`). It claims into that room
when a handler slot is idle with nothing buffered, or when at least half the buffer has been
used up; the waiting outcomes ride in the claim's transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from ... import sql
from ...model import metrics
from ...model.attempt import classify
from ...model.errors import Permanent
from ...model.job import Lease
from ...model.limits import claim_limits
from ...model.specs import QueueSpec, TaskSpec
from ...sql import doors
from ...sql.settled import after_rows
from .buffer import Buffer
from .counters import Counters
from .executor import Executor
from .inflight import Flights, FlightState, InFlight
from .outcomes import Outcomes
from .session import Session

log = logging.getLogger("workerpool.worker")


class Claims:
    """Claims the jobs of one queue into the worker's free room (the main loop's)."""

    def __init__(
        self,
        spec: QueueSpec,
        queue: str,
        worker_id: str,
        *,
        tasks: dict[str, TaskSpec],
        task_versions: dict[str, int],
        session: Session,
        flights: Flights,
        outcomes: Outcomes,
        executor: Executor,
        counters: Counters,
        closed: Callable[[], bool],
        on_claim: Callable[[], None],
    ) -> None:
        self.spec, self.queue, self.worker_id = spec, queue, worker_id
        self.tasks, self.task_versions = tasks, task_versions
        self.session, self.flights, self.outcomes = session, flights, outcomes
        self.executor, self.counters, self.closed = executor, counters, closed
        self.on_claim = on_claim
        #: What the doors in learn of this queue (``workerpool_tasks``, its bound).
        self.door_rows: list[dict[str, Any]] = []
        self.door_bounds: dict[str, int] = {}
        self.limits = claim_limits(spec, tasks)  # falsy for a queue without limits
        self.buffer = Buffer(spec.concurrency, spec.prefetch, limited=bool(self.limits))
        self._published = False  # the limits, in the queue's row, for `workerpool status`
        self._key_cursor = ""  # where the next per-key claim's key spread resumes
        self._shared = False  # the last claim found the limits out of the fleet's reach
        #: A claim failed on the client's side: its commit may still have reached the server,
        #: leaving rows ``processing`` under this worker that it does not know it holds.
        self.unsure = False

    @property
    def capacity(self) -> int:
        """Jobs held at most, now: the handler slots plus the buffer."""
        return self.spec.concurrency + self.buffer.size

    @property
    def refill(self) -> int:
        """Claim no fewer rows than this while every handler slot is busy."""
        return self.buffer.refill

    def busy(self) -> int:
        """Jobs held once the waiting outcomes are written: running (timed-out ones too),
        buffered, or finished with the outcome not collected yet (still ``processing``)."""
        return len(self.flights) - self.outcomes.freed()

    def free_slots(self) -> int:
        """Jobs this worker may still claim: its free slots plus free buffer places.

        None while a suspect runs: it runs alone, so that a death while it runs is its own. A
        suspect whose outcome waits to be written frees the worker: that outcome rides with the
        next claim, in its transaction, so the next job need not wait for the poll interval.
        """
        if self.closed() or self._suspect_running():
            return 0
        return self.capacity - self.busy()

    def _suspect_running(self) -> bool:
        suspects = [id(flight) for flight in self.flights if flight.suspect]
        if not suspects:  # the common pass: one look at each flight, as before
            return False
        finished = {id(flight) for flight, _ in self.outcomes.unwritten}
        return any(suspect not in finished for suspect in suspects)

    def due(self) -> bool:
        """Claim when a handler slot idles with nothing buffered, or the buffer ran half empty.

        Claiming a few rows each time one job finishes would cost a transaction per job; the
        refill threshold makes each claim fetch at least half the buffer (no buffer: claim into
        any free slot).
        """
        room = self.free_slots()
        return room > 0 and (room >= self.refill or self.capacity - room < self.spec.concurrency)

    def claim_and_write_outcomes(self) -> None:
        """Write the waiting outcomes and claim into the free slots, in one transaction.

        One BEGIN/limits/COMMIT per pass instead of two; with no outcome waiting, the claim alone
        is one autocommit statement (one round trip). Nothing changes in memory before the
        commit: if the transaction fails, the outcomes stay waiting and nothing was claimed.
        """
        if not self._published:
            self._publish_limits()
        batch = list(self.outcomes.unwritten)
        began = time.monotonic()
        unsure, self.unsure = self.unsure, True  # until this claim's commit is seen
        if batch or unsure or self.session.pooled or self.limits:  # limited: holds a lock
            with self.session.transaction() as conn:
                if unsure:
                    self._give_back_unheld(conn)
                states = self.outcomes.record(conn, batch) if batch else {}
                rows = self._claim(conn)
        else:  # the claim alone, as after a wake-up: pickup latency is this round trip
            with self.session.single_statement() as conn:
                states, rows = {}, self._claim(conn)
        self.unsure = False
        self._resize(batch, time.monotonic() - began)
        self.outcomes.written(batch, states)
        if self.limits:
            self._after_limited_claim(rows)
        metrics.record.claimed(self.queue, rows)
        if len(rows) > 1:  # the buffer is FIFO: hand jobs out in the claim's order
            rows.sort(key=_claim_order)
        if rows:
            self.on_claim()  # before any handler starts: one may take the process down
        for row in rows:
            self._start(row)
        self.counters.claimed += len(rows)

    def give_back_unheld(self) -> None:
        """On the way out: give back what a claim whose reply was lost may have taken."""
        if self.unsure:
            with self.session.transaction() as conn:
                self._give_back_unheld(conn)
            self.unsure = False

    def _give_back_unheld(self, conn: Connection) -> None:
        """Before claiming again, in the claim's transaction: every row ``processing`` under
        this worker that it does not hold goes back to the queue (attempt refunded), so a
        suspect it claims next really runs alone and a death then is the suspect's own."""
        rows = sql.return_unheld(conn, self.worker_id, [f.lease.job_id for f in self.flights])
        if rows:
            after_rows(conn, rows)  # a cancel asked meanwhile ends a row here
            log.warning(
                "gave back %d job(s) a claim took whose reply was lost",
                len(rows),
                extra={"event": "unheld_returned", "queue": self.queue, "count": len(rows)},
            )

    def _resize(self, batch: list[Any], seconds: float) -> None:
        """Feed the buffer the run times that rode with this claim, then its round trip."""
        for flight, _ in batch:
            if flight.ran is not None:
                self.buffer.ran(flight.ran)
        self.buffer.claimed(seconds)

    def _claim(self, conn: Connection) -> list[Any]:
        return sql.claim(
            conn,
            queue=self.queue,
            worker=self.worker_id,
            limit=self.free_slots(),
            task_versions=self.task_versions,
            alone=self.busy() == 0,
            limits=self.limits,
            key_cursor=self._key_cursor,
            shared=self._shared,
        )

    def _after_limited_claim(self, rows: list[Any]) -> None:
        """The next claim's lock (shared while the limits are out of reach: an empty claim
        cannot say, so it goes exclusive) and its key cursor (back to the first key after an
        empty claim)."""
        self._shared = bool(rows) and all(row.limits_safe for row in rows)
        if self.limits.keys:
            self._key_cursor = max((row.concurrency_key or "" for row in rows), default="")

    def _publish_limits(self) -> None:
        """The queue's limits (for ``workerpool status``), and its tasks and bound for the
        doors in (SQL's ``workerpool_enqueue``, HTTP)."""
        with self.session.transaction() as conn:
            sql.publish_limits(conn, self.queue, self.limits.as_json() if self.limits else None)
            doors.publish(conn, self.door_rows, self.door_bounds, self.worker_id)
        self._published = True

    def _start(self, row: Any) -> None:
        """Hand a claimed job to the handler threads (it may wait in their queue: prefetch)."""
        lease = Lease(row.id, row.attempts, self.worker_id)
        spec = self.tasks.get(row.task)
        if spec is None:  # the claim filters on known tasks; never run what we cannot
            self._refuse(row, lease)
            return
        flight = InFlight(lease, spec, time.monotonic(), None, suspect=row.crashes > 0)
        self.flights.add(flight)
        self.executor.submit(flight, row)

    def _refuse(self, row: Any, lease: Lease) -> None:
        spec = TaskSpec(name=row.task, queue=self.queue, fn=lambda job: None)
        flight = InFlight(lease, spec, time.monotonic(), None, FlightState.FINISHED)
        self.flights.add(flight)
        error = Permanent(f"no handler for task {row.task!r} in this worker")
        self.outcomes.add(flight, classify(error, spec, lease.attempt, self.worker_id))


def _claim_order(row: Any) -> tuple:
    """The due arm's order (priority, then run_at, then id): the claim returns rows unordered."""
    return (-row.priority, row.run_at, row.id)
