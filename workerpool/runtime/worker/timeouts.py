"""Task timeouts: the timeout, not the handler, decides an attempt that overruns it.

A timed-out attempt is a failure like any other (retried per policy), written at once with the
handler's stack as its traceback; an ``async def`` handler is cancelled. A sync handler cannot
be stopped from outside: one that still runs RECYCLE_GRACE seconds later gets its process
recycled.

A cancelled handler is given its queue's ``cancel_grace`` the same way: one that still runs
after it has its row written ``cancelled`` without it, and the process is recycled once its
other jobs finish.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Iterator

from ...model.attempt import CANCELLED, timed_out
from .counters import Counters
from .inflight import Flights, FlightState, InFlight, Step
from .outcomes import Outcomes

log = logging.getLogger("workerpool.worker")

RECYCLE_GRACE = 5.0  # seconds a timed-out handler gets before the child is recycled


class Timeouts:
    """Enforces the ``timeout`` of every running job, from the main loop."""

    def __init__(self, flights: Flights, outcomes: Outcomes, counters: Counters) -> None:
        self.flights, self.outcomes, self.counters = flights, outcomes, counters
        self.recycle = False  # a handler ignores its timeout: this process must be replaced

    def deadlines(self) -> Iterator[float]:
        """When each in-flight job times out, or when a timed-out one warrants a recycle."""
        for flight in self.flights:
            if flight.deadline is None or flight.returned or (flight.overdue and self.recycle):
                continue
            yield flight.deadline + (RECYCLE_GRACE if flight.overdue else 0.0)
        for flight in self.flights:
            if flight.cancel_deadline is not None and not flight.overdue and not flight.returned:
                yield flight.cancel_deadline

    def enforce(self) -> bool:
        """Time out the jobs past their deadline; True once a recycle is due (the caller claims
        nothing more, and stops once its other jobs finish)."""
        now = time.monotonic()
        recycle = False
        for flight in self.flights:
            if flight.deadline is None or now < flight.deadline or flight.returned:
                continue
            if not flight.overdue:
                self._time_out(flight)
            elif now >= flight.deadline + RECYCLE_GRACE and not self.recycle:
                log.error(
                    "handler of job %s ignores its timeout; recycling this worker once"
                    " its other jobs finish",
                    flight.lease.job_id,
                    extra={"event": "worker_recycle", "job_id": flight.lease.job_id},
                )
                self.recycle = recycle = True
        return self._enforce_cancels(now) or recycle

    def _enforce_cancels(self, now: float) -> bool:
        """Write ``cancelled`` for the handlers that ignore a cancel past its grace; True if any
        did (the process is recycled)."""
        ignored = False
        for flight in self.flights:
            if (
                flight.cancel_deadline is None
                or now < flight.cancel_deadline
                or flight.overdue
                or flight.returned
            ):
                continue
            if flight.transition(Step.TIME_OUT) not in (
                FlightState.RUNNING,
                FlightState.RUNNING_LOST,
            ):
                continue  # its handler returned just now: its cancelled outcome is on its way
            self.outcomes.add(flight, CANCELLED)
            log.error(
                "handler of job %s ignores its cancel; cancelled without it, recycling this"
                " worker once its other jobs finish",
                flight.lease.job_id,
                extra={"event": "worker_recycle", "job_id": flight.lease.job_id},
            )
            ignored = not self.recycle
            self.recycle = True
        return ignored

    def _time_out(self, flight: InFlight) -> None:
        """The timeout decides this attempt: record a TimeoutError; cancel an async handler."""
        if flight.transition(Step.TIME_OUT) not in (FlightState.RUNNING, FlightState.RUNNING_LOST):
            return  # its handler returned just now: its own result stands
        future = flight.future  # read after the step: see InFlight.hold_future
        stack = stack_of(flight)
        if future is not None:
            future.cancel()
        self.counters.timeouts += 1
        cancelled = flight.cancel_requested  # asked to stop first: that is its end
        self.outcomes.add(
            flight, CANCELLED if cancelled else timed_out(flight.spec, flight.lease, stack)
        )
        log.warning(
            "job %s exceeded its timeout of %gs",
            flight.lease.job_id,
            flight.spec.timeout,
            extra={"event": "job_timeout", "job_id": flight.lease.job_id},
        )


def stack_of(flight: InFlight) -> str:
    """Where a sync handler is right now (what its timeout entry shows as traceback)."""
    frame = sys._current_frames().get(flight.thread) if flight.thread else None
    if frame is None or flight.future is not None:
        return ""
    return "Handler stack when its timeout expired (most recent call last):\n" + "".join(
        traceback.format_stack(frame)
    )
