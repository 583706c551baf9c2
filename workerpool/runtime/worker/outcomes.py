"""Outcomes on their way to the database: batched, fenced on each lease, dead jobs reported.

Handler threads hand their outcomes to the main loop through :attr:`Outcomes.results`; the main
loop writes every waiting one in one transaction (riding with the next claim when it can), and
only after the commit forgets the jobs and reports the ones that went ``dead``.
"""

from __future__ import annotations

import logging
import queue as queue_module
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ... import sql
from ...model import metrics
from ...model.attempt import Outcome
from ...model.job import Lease
from ...model.notices import CancelNotice, DeadNotice, report_cancelled, report_dead
from ...model.specs import Hooks
from ...model.states import DeadReason, JobState, OutcomeKind
from ...sql import awaits, control, signals, steps
from ...sql.job_logs import insert_logs
from ...sql.results import complete_settling
from ...sql.settled import NOTHING, Followed, after_states
from ..release import Released
from .counters import Counters
from .inflight import Flights, InFlight, Step
from .session import Session

log = logging.getLogger("workerpool.worker")

OUTCOME_FLUSH = 0.1  # seconds a finished job's outcome may wait to ride with the next claim

#: (finished job, its outcome, or None when the timeout had already decided it)
Result = tuple[InFlight, Outcome | None]


def record(conn: Connection, lease: Lease, outcome: Outcome) -> str | None:
    """Write one outcome, fenced on the lease. Returns the job's new state, None if lease lost.

    What follows a final outcome (waiters, batches) is :func:`record_many`'s: call that."""
    kind, job = outcome.kind, [(lease.job_id, lease.attempt)]
    if kind == OutcomeKind.DONE:
        done = complete_settling(conn, lease.worker, [(*job[0], outcome.result)])
        return JobState.DONE if done else None
    if kind == OutcomeKind.FAIL:
        return sql.fail(conn, lease, outcome.error, outcome.delay)
    if kind == OutcomeKind.PERMANENT:
        return JobState.DEAD if sql.mark_permanent(conn, lease, outcome.error) else None
    if kind == OutcomeKind.SNOOZE and outcome.suspension is not None:
        return steps.sleep(conn, lease, outcome.suspension.name, outcome.delay)
    if kind == OutcomeKind.SNOOZE:
        return sql.snooze(conn, lease, outcome.delay)
    if kind == OutcomeKind.WAIT:
        pause = outcome.suspension
        assert pause is not None
        if pause.job_id is not None:  # job.wait_for_job
            return awaits.wait(conn, lease, pause.job_id, pause.name, pause.seconds)
        return signals.wait(conn, lease, pause.name, pause.seconds)
    if kind == OutcomeKind.INTERRUPTED:
        return sql.give_back(conn, lease, outcome.error)
    if kind == OutcomeKind.UNSTARTED:
        return sql.return_unstarted(conn, lease.worker, job).get(lease.job_id)
    if kind == OutcomeKind.CANCELLED:
        return JobState.CANCELLED if sql.finish_cancelled(conn, lease) else None
    if kind == OutcomeKind.COMMITTED:  # the handler's transaction wrote it, and what followed
        return JobState.DONE
    raise ValueError(f"unknown outcome {kind!r}")


#: The outcomes written for a whole batch in one statement each.
BULK = (OutcomeKind.DONE, OutcomeKind.UNSTARTED)


def record_many(
    conn: Connection, worker: str, results: Sequence[tuple[Lease, Outcome]]
) -> dict[int, str | None]:
    """Write a batch of outcomes: every ``done`` in one statement (with its result), every
    ``unstarted`` in one, the rest one by one; then, once, what follows the final ones: their
    waiters are woken and their batches finished (``sql.settled``: nothing more is sent
    when no row has a batch or a waiter). Returns ``{job_id: new state or None}``."""
    return record_settling(conn, worker, results)[0]


def record_settling(
    conn: Connection, worker: str, results: Sequence[tuple[Lease, Outcome]]
) -> tuple[dict[int, str | None], Followed]:
    """:func:`record_many`, and what followed: the batches the outcomes finished (their
    callbacks inserted) and the dependents they cancelled."""
    states: dict[int, str | None] = {}
    done = [
        (lease.job_id, lease.attempt, outcome.result)
        for lease, outcome in results
        if outcome.kind == OutcomeKind.DONE
    ]
    completed = complete_settling(conn, worker, done)
    states.update((job_id, None) for job_id, _, _ in done)
    states.update((row.id, JobState.DONE) for row in completed)
    unstarted = [
        (lease.job_id, lease.attempt)
        for lease, outcome in results
        if outcome.kind == OutcomeKind.UNSTARTED
    ]
    if unstarted:
        applied = sql.return_unstarted(conn, worker, unstarted)
        states.update((job_id, applied.get(job_id)) for job_id, _ in unstarted)
    for lease, outcome in results:
        if outcome.kind not in BULK:
            states[lease.job_id] = record(conn, lease, outcome)
    committed = [o.followed for _, o in results if o.kind == OutcomeKind.COMMITTED]
    if not committed:
        return states, after_states(conn, completed, states)
    # what followed those already happened in the handlers' transactions: not again here
    theirs = _ids(results)
    ours = {job_id: state for job_id, state in states.items() if job_id not in theirs}
    followed = after_states(conn, completed, ours)
    for earlier in committed:
        followed = Followed(followed.fired + earlier.fired, followed.cancelled + earlier.cancelled)
    return states, followed


def _ids(results: Sequence[tuple[Lease, Outcome]]) -> set[int]:
    """The jobs among ``results`` that their handlers' own transactions completed."""
    return {lease.job_id for lease, outcome in results if outcome.kind == OutcomeKind.COMMITTED}


#: The ``outcome`` label of workerpool_jobs_finished_total for an outcome written as pending.
_PENDING_LABELS = {
    OutcomeKind.SNOOZE: "snoozed",
    OutcomeKind.INTERRUPTED: "released",
    OutcomeKind.WAIT: "waiting",
}


def _outcome_label(outcome: Outcome, state: str | None) -> str:
    """done, retried (raised, a retry is scheduled), dead, snoozed, released, cancelled, or
    lost (fenced out). A failed attempt is ``retried`` or ``dead``: one series each, so their
    sum is the failure rate and nothing is counted twice."""
    if state is None:
        return "lost"
    if state == JobState.PENDING:
        return _PENDING_LABELS.get(outcome.kind, "released")
    if state == JobState.FAILED:
        return "retried"
    return str(state)


def log_retry(flight: InFlight, outcome: Outcome) -> None:
    """A failed attempt that will run again: a WARNING with its error and next run time (the
    dead ones have their own ERROR line, :func:`report_dead`)."""
    error = outcome.error or {}
    job_id = flight.lease.job_id
    next_run = datetime.now(UTC) + timedelta(seconds=outcome.delay)
    log.warning(
        "job %s failed, will retry: task=%s attempt=%s retry_in=%.1fs next_run=%s error=%s: %s",
        job_id,
        flight.spec.name,
        flight.lease.attempt,
        outcome.delay,
        next_run.isoformat(timespec="seconds"),
        error.get("type"),
        error.get("message"),
        extra={
            "event": "job_retry_scheduled",
            "job_id": job_id,
            "task": flight.spec.name,
            "attempt": flight.lease.attempt,
            "next_run": next_run.isoformat(),
            "error_type": error.get("type"),
        },
    )


def log_finished(flight: InFlight, state: str) -> None:
    job_id = flight.lease.job_id
    log.debug(
        "job %s finished state=%s task=%s attempt=%s ran=%.3fs",
        job_id,
        state,
        flight.spec.name,
        flight.lease.attempt,
        flight.ran or 0.0,
        extra={
            "event": "job_finished",
            "job_id": job_id,
            "state": str(state),
            "task": flight.spec.name,
            "attempt": flight.lease.attempt,
        },
    )


class Outcomes:
    """The outcomes a worker has not written yet, and what follows once they are."""

    def __init__(
        self,
        queue: str,
        worker_id: str,
        flights: Flights,
        counters: Counters,
        *,
        on_dead: Hooks,
        on_cancel: Hooks,
    ) -> None:
        self.queue, self.worker_id = queue, worker_id
        self.on_dead, self.on_cancel = on_dead, on_cancel  # the registry's hooks
        self.flights, self.counters = flights, counters
        #: Handler threads put their results here; only the main loop takes them.
        self.results: queue_module.SimpleQueue[Result] = queue_module.SimpleQueue()
        self.unwritten: list[tuple[InFlight, Outcome]] = []
        #: What the last :meth:`record` finished (reported once :meth:`written`).
        self.followed: Followed = NOTHING
        #: The cancel requests (by, message) of the rows the last :meth:`record` cancelled.
        self.requests: dict[int, Any] = {}
        self.last_write = 0.0  # monotonic: the last outcomes write

    def add(self, flight: InFlight, outcome: Outcome) -> None:
        self.unwritten.append((flight, outcome))

    def collect(self) -> None:
        """Take what the handler threads finished."""
        while True:
            try:
                flight, outcome = self.results.get_nowait()
            except queue_module.Empty:
                return
            if outcome is None:  # it had timed out: the timeout is its outcome
                self.flights.retire(flight)
            else:
                self.add(flight, outcome)

    def due(self, buffered: int) -> bool:
        """Outcomes not riding with a claim are written within OUTCOME_FLUSH seconds; at once
        when the worker keeps no buffer (``buffered``: its size), whose handlers would idle."""
        if not self.unwritten:
            return False
        return not buffered or time.monotonic() - self.last_write >= OUTCOME_FLUSH

    def freed(self) -> int:
        """Jobs whose handler slot their waiting outcome's write will free."""
        return sum(1 for flight, _ in self.unwritten if flight.returned)

    def write(self, session: Session) -> None:
        """Write every outcome waiting, in one transaction; kept for the next pass on failure."""
        if not self.unwritten:
            return
        batch = list(self.unwritten)
        with session.transaction() as conn:
            states = self.record(conn, batch)
        self.written(batch, states)

    def record(
        self, conn: Connection, batch: list[tuple[InFlight, Outcome]]
    ) -> dict[int, str | None]:
        """Write ``batch`` in ``conn``'s transaction; nothing changes in memory until
        :meth:`written` is told the commit succeeded."""
        states, self.followed = record_settling(
            conn, self.worker_id, [(f.lease, outcome) for f, outcome in batch]
        )
        insert_logs(
            conn,
            [
                (f.lease.job_id, f.lease.attempt, f.logs.as_json(), f.logs.dropped)
                for f, _ in batch
                if f.logs and states.get(f.lease.job_id) is not None
            ],
        )
        cancelled = [job_id for job_id, state in states.items() if state == JobState.CANCELLED]
        # rare, so read only then: who asked, and why, for the log line and the hooks
        self.requests = control.cancel_requests(conn, cancelled) if cancelled else {}
        return states

    def written(self, batch: list[tuple[InFlight, Outcome]], states: dict[int, str | None]) -> None:
        """After the commit: forget the written outcomes, retire their jobs, report the dead."""
        self.last_write = time.monotonic()
        self.unwritten = self.unwritten[len(batch) :]
        dead = [
            self._recorded(flight, outcome, states.get(flight.lease.job_id))
            for flight, outcome in batch
        ]
        followed, self.followed = self.followed, NOTHING
        metrics.record.batches_finished(followed.fired, "outcome")
        cancelled = [
            self._cancel_notice(f)
            for f, _ in batch
            if states.get(f.lease.job_id) == JobState.CANCELLED
        ]
        for notice in followed.cancelled:  # a parent's failure cancelled them: cancels too
            metrics.record.finished(notice.queue, notice.task, "cancelled", None)
        # right after the commit, not at the end of the pass: a SIGKILL between the two would
        # lose these counts (the pass goes on to claim and to beat, round trips away)
        metrics.record.flush()
        self.report_dead([notice for notice in dead if notice is not None])
        cancelled += followed.cancelled
        if cancelled:
            report_cancelled(self.on_cancel, cancelled)

    def _cancel_notice(self, flight: InFlight) -> CancelNotice:
        request = self.requests.get(flight.lease.job_id) or {}
        return CancelNotice(
            flight.lease.job_id,
            self.queue,
            flight.spec.name,
            flight.lease.attempt,
            request.get("by") or "",
            request.get("message") or "",
        )

    def _recorded(self, flight: InFlight, outcome: Outcome, state: str | None) -> DeadNotice | None:
        flight.transition(Step.RECORD)
        self.flights.retire(flight)
        job_id = flight.lease.job_id
        if outcome.kind == OutcomeKind.UNSTARTED:
            self.counters.unstarted += state is not None
            return None
        self.counters.finished += 1
        metrics.record.finished(
            self.queue, flight.spec.name, _outcome_label(outcome, state), flight.ran
        )
        if state is None:
            self.counters.lost += 1
            log.warning(
                "outcome of job %s not written: lease lost (or written before a connection drop)",
                job_id,
                extra={"event": "outcome_fenced_out", "job_id": job_id},
            )
            return None
        self.counters.states[state] = self.counters.states.get(state, 0) + 1
        if state == JobState.FAILED:
            log_retry(flight, outcome)
        if state != JobState.DEAD:
            if log.isEnabledFor(logging.DEBUG):  # a per-job line: nothing built unless shown
                log_finished(flight, state)
            return None
        reason = (
            DeadReason.PERMANENT if outcome.kind == OutcomeKind.PERMANENT else DeadReason.EXHAUSTED
        )
        return DeadNotice(
            job_id,
            self.queue,
            flight.spec.name,
            flight.lease.attempt,
            reason,
            outcome.error or None,
        )

    def report_released(self, released: Released) -> None:
        """What the release of dead predecessors' claims did, once committed: the jobs that
        went dead, and the dependents cancelled with them (cancels like any other: counted
        under their own queue, passed to the ``on_cancel`` hooks)."""
        self.report_dead(released.dead)
        self.report_dependents_cancelled(released.cancelled)

    def report_dependents_cancelled(self, notices: list[CancelNotice]) -> None:
        """Dependents cancelled because a parent this process ended failed, once committed."""
        for notice in notices:
            metrics.record.finished(notice.queue, notice.task, "cancelled", None)
        if notices:
            metrics.record.flush()
            report_cancelled(self.on_cancel, notices)

    def report_dead(self, notices: list[DeadNotice]) -> None:
        """The one place this process reports jobs it moved to ``dead`` (log + on_dead hooks)."""
        if not notices:
            return
        try:
            report_dead(self.on_dead, notices)
        except Exception:
            log.exception("reporting dead jobs failed", extra={"event": "report_dead_failed"})
