"""A job whose worker was lost: its process died, or its lease went stale on the last attempt.

The attempt stays spent (the handler may have run), unlike ``give_back``, which refunds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, update

from ..schema import jobs
from ..states import DeadReason, JobState
from .clock import seconds
from .outcomes import errors_append

#: A crashed process's jobs come back spread over ``random() * min(cap, 0.5 s * 2^(attempts-1))``:
#: jobs that died together (a poison message and its innocent neighbours in one process) are
#: then rarely claimed together again, so the neighbours do not spend their attempts with it.
ORPHAN_SPREAD_CAP = 30.0

#: The columns the recovery statements return for logging and dead-job notices.
_CHANGED = (jobs.c.id, jobs.c.queue, jobs.c.task, jobs.c.state, jobs.c.attempts)


def _orphan_spread():
    window = func.least(ORPHAN_SPREAD_CAP, 0.5 * func.power(2.0, jobs.c.attempts - 1))
    return func.now() + func.make_interval(0, 0, 0, 0, 0, 0, func.random() * window)


def _orphan_values(error: Mapping[str, Any]) -> dict[str, Any]:
    exhausted = jobs.c.attempts >= jobs.c.max_attempts
    return {  # .value: plain str parameters, typed as in every other CASE (see outcomes.fail)
        "state": case((exhausted, JobState.DEAD.value), else_=JobState.PENDING.value),
        "dead_reason": case((exhausted, DeadReason.ABANDONED.value), else_=None),
        "finished_at": case((exhausted, func.now()), else_=None),
        "run_at": case((exhausted, jobs.c.run_at), else_=_orphan_spread()),
        "errors": errors_append(error),
    }


# reclaim_from_dead_worker: a dead process's rows → pending (spread out) or dead/abandoned.
# Index: ix_workerpool_jobs_claimed_by.
def reclaim_from_dead_worker(conn: Connection, worker: str, error: Mapping[str, Any]) -> list[Any]:
    """A process died: its rows go back to ``pending`` (attempt stays spent) or ``dead/abandoned``.

    Returns ``(id, queue, task, state, attempts)`` of every row changed.
    """
    stmt = (
        update(jobs)
        .where(jobs.c.state == JobState.PROCESSING, jobs.c.claimed_by == worker)
        .values(**_orphan_values(error))
        .returning(*_CHANGED)
    )
    return list(conn.execute(stmt))


# sweep_abandoned: a queue's stale leases with no attempts left → dead/abandoned.
# Index: ix_workerpool_jobs_leased.
def sweep_abandoned(
    conn: Connection, queue: str, stale_after: float, error: Mapping[str, Any]
) -> list[Any]:
    """Stale leases with no attempts left: the claim will never take them, so dead-letter them."""
    stmt = (
        update(jobs)
        .where(
            jobs.c.queue == queue,
            jobs.c.state == JobState.PROCESSING,
            jobs.c.claimed_at < func.now() - bindparam("stale_after", seconds(stale_after)),
            jobs.c.attempts >= jobs.c.max_attempts,
        )
        .values(state=JobState.DEAD, dead_reason=DeadReason.ABANDONED, finished_at=func.now())
        .values(errors=errors_append(error))
        .returning(*_CHANGED)
    )
    return list(conn.execute(stmt))
