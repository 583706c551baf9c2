"""This process in the workers registry, and the leases of the jobs it holds.

The process registers once (releasing the claims of the dead predecessors it replaces), then
renews the leases of its running and buffered jobs every ``stale_after/3``, which is also the
registry's beat. A lease that renewal finds gone belongs to another process now: a buffered job
is dropped unstarted, a running one finishes but its outcome will be fenced out.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from ... import sql
from ...model.notices import CancelNotice
from ..release import Released, release_orphans
from .counters import Counters
from .inflight import Flights, FlightState, InFlight, Step
from .session import Session

log = logging.getLogger("workerpool.worker")

REGISTRY_BEAT = 10.0  # seconds between beats at most (status: live if seen within 60 s)


class Leases:
    """Registration, renewal and the registry's beat, from the main loop."""

    def __init__(
        self,
        session: Session,
        flights: Flights,
        counters: Counters,
        *,
        worker_id: str,
        queue: str,
        task_versions: dict[str, int],
        stale_after: float,
        orphans: tuple[str, ...],
        capacity: int | None = None,
    ) -> None:
        self.session, self.flights, self.counters = session, flights, counters
        self.worker_id, self.queue, self.task_versions = worker_id, queue, task_versions
        self.orphans, self.stale_after = list(orphans), stale_after
        self.capacity = capacity  # jobs held at most, registered for the limited claim
        # also the beat of the workers registry: `workerpool status` needs one every few seconds
        self.every = min(stale_after / 3, REGISTRY_BEAT)
        self.registered = False
        self.last_renew = time.monotonic()
        self._renew_now = False  # after an outage: renew before anything is claimed
        #: Told the held jobs that renewal found cancelled (the path without notifications).
        self.on_cancelled: Callable[[set[int]], None] = lambda ids: None
        #: Told the dependents that a recovery's cancelled rows cancelled in turn.
        self.on_dependents_cancelled: Callable[[list[CancelNotice]], None] = lambda notices: None

    def register_once(self) -> Released:
        """Register this process and release the claims of the predecessors it replaces.

        Returns what the release did (the jobs that went dead, the dependents cancelled with
        them), for the caller to report.
        """
        if self.registered:
            return Released()
        with self.session.transaction() as conn:
            sql.register_worker(
                conn,
                self.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                queue=self.queue,
                tasks=self.task_versions,
                capacity=self.capacity,
            )
            released = release_orphans(conn, self.orphans)
        self.orphans.clear()
        self.registered = True
        return released

    def renew_soon(self) -> None:
        """Leases may have gone stale during an outage: renew before the next claim."""
        self._renew_now = True

    def next_due(self) -> float:
        return self.last_renew + self.every

    def renewable(self) -> list[InFlight]:
        """The jobs whose leases renewal extends: every one this worker holds."""
        return self.flights.held()

    def renew_if_due(self) -> None:
        """Extend the leases of running jobs every stale_after/3; beat the worker registry;
        recover the queue's leases that other workers let go stale (a host gone)."""
        now = time.monotonic()
        if not self._renew_now and now - self.last_renew < self.every:
            return
        held = self.renewable()
        renewing = bool(held)
        with self.session.transaction() as conn:
            if renewing:
                renewed, cancelled = sql.renew_reading_cancels(
                    conn, self.worker_id, [(f.lease.job_id, f.lease.attempt) for f in held]
                )
            registered = sql.beat_worker(conn, self.worker_id)
        if renewing:
            self._lost([f for f in held if f.lease.job_id not in renewed])
            if cancelled:
                self.on_cancelled(cancelled)
        if not registered:
            self.registered = False  # pruned while we were away: register again
        self.last_renew, self._renew_now = now, False
        self._recover_stale()

    def _recover_stale(self) -> None:
        """Other workers' leases gone stale (a host lost): attributed and queued again. In a
        transaction of its own: a failure here must not undo the renewal above."""
        with self.session.transaction() as conn:
            recovered, cancelled = sql.recover_stale(conn, self.queue, self.stale_after)
        self.on_dependents_cancelled(cancelled)
        if recovered:
            log.warning(
                "recovered %d stale lease(s) of lost workers",
                len(recovered),
                extra={"event": "stale_recovered", "queue": self.queue, "count": len(recovered)},
            )

    def beat_if_quiet(self, poll_interval: float) -> None:
        """A pass with nothing to do still proves, once per poll interval, that the DB answers."""
        if self.session.reached_db or time.monotonic() - self.session.last_contact < poll_interval:
            return
        with self.session.transaction() as conn:
            if not sql.beat_worker(conn, self.worker_id):
                self.registered = False

    def unregister(self) -> None:
        if self.registered:
            with self.session.transaction(main_loop=False) as conn:
                sql.unregister_worker(conn, self.worker_id)

    def _lost(self, flights: list[InFlight]) -> None:
        for flight in flights:
            if flight.completed_in:  # its handler's own transaction ended it: not a loss
                flight.transition(Step.LOSE)
                continue
            self.counters.lost += 1
            log.warning(
                "lease lost on job %s: another process may run it",
                flight.lease.job_id,
                extra={"event": "lease_lost", "job_id": flight.lease.job_id},
            )
            if flight.transition(Step.LOSE) is FlightState.BUFFERED:  # dropped, never started
                self.flights.retire(flight)
