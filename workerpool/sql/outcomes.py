"""A claimed job's attempt ends: done, failed, permanent, snoozed, given back, or never started.

Every write here is fenced on the job's lease and reports whether it applied, so a process that
lost its lease can never overwrite the new owner's result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    all_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Text

from ..model.errors import MAX_DELAY
from ..model.states import DeadReason, JobState
from .cancelled import or_cancelled
from .clock import seconds
from .leases import FENCE_MANY, Lease, fence, lease_params
from .schema import jobs

#: A released job waits this long before anyone may claim it again: its handler may still be
#: running in the exiting process, which is gone by then (the supervisor SIGKILLs what is left
#: 2 s after the drain deadline). Without it another replica could run the job twice at once.
RELEASE_HOLD = 3.0


def after(delay_seconds: float):
    """``now() + delay`` on the database clock (delays are bounded by ``MAX_DELAY``)."""
    bounded = min(max(0.0, delay_seconds), MAX_DELAY)
    return func.now() + bindparam("delay", seconds(bounded), unique=True)


def errors_append(entry: Mapping[str, Any]):
    """``errors || [{"attempt": attempts} + entry + {"at": now()}]``.

    The time comes from the database clock; the attempt from the row unless the entry names it
    (bulk releases and sweeps write one entry to rows at different attempts).
    """
    stamped = (
        func.jsonb_build_object("attempt", jobs.c.attempts)
        .op("||")(cast(literal(json.dumps(entry, default=str), Text), JSONB))
        .op("||")(func.jsonb_build_object("at", func.now()))
    )
    return jobs.c.errors.op("||")(func.jsonb_build_array(stamped))


def complete(conn: Connection, worker: str, leases: Sequence[tuple[int, int]]) -> set[int]:
    """Mark ``(job_id, attempt)`` leases done in one statement; returns the ids that applied."""
    if not leases:
        return set()
    return set(conn.execute(_COMPLETE, lease_params(worker, leases)).scalars())


# complete: leased rows → done.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
_COMPLETE = (
    update(jobs)
    .where(FENCE_MANY)
    .values(state=JobState.DONE, finished_at=func.now())
    .returning(jobs.c.id)
)


# fail: one leased row → failed until now()+delay, or dead/exhausted at the cap.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def fail(conn: Connection, lease: Lease, error: Mapping[str, Any], delay: float) -> str | None:
    """A failed attempt: ``failed`` until ``now()+delay``, or ``dead/exhausted`` at the cap
    (``cancelled`` if an operator cancelled it meanwhile).

    Returns the new state, or None when the lease was lost (nothing written).
    """
    exhausted = jobs.c.attempts >= jobs.c.max_attempts
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    # .value: a CASE types its parameters by their Python type, and a plain
                    # str keeps the bound ``::VARCHAR`` an enum member would lose
                    "state": case((exhausted, JobState.DEAD.value), else_=JobState.FAILED.value),
                    "dead_reason": case((exhausted, DeadReason.EXHAUSTED.value), else_=None),
                    "run_at": case((exhausted, jobs.c.run_at), else_=after(delay)),
                    "finished_at": case((exhausted, func.now()), else_=None),
                    "errors": errors_append(error),
                    "crashes": 0,  # an ordinary outcome: no longer a suspect
                }
            )
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()


# mark_permanent: one leased row → dead/permanent at once.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def mark_permanent(conn: Connection, lease: Lease, error: Mapping[str, Any]) -> bool:
    """``Permanent``: dead at once with ``dead_reason='permanent'``."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            state=JobState.DEAD,
            dead_reason=DeadReason.PERMANENT,
            finished_at=func.now(),
            errors=errors_append(error),
        )
    )
    return conn.execute(stmt).rowcount == 1


# snooze: one leased row → pending at now()+delay, attempt refunded.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def snooze(conn: Connection, lease: Lease, delay: float) -> str | None:
    """``RetryLater``: pending again at ``now()+delay``; the attempt is given back.

    Returns the new state (``cancelled`` if an operator asked), None when the lease was lost."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    "state": JobState.PENDING,
                    "attempts": jobs.c.attempts - 1,
                    "run_at": after(delay),
                    "crashes": 0,  # an ordinary outcome: no longer a suspect
                }
            )
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()


# give_back: one leased row → pending after RELEASE_HOLD, attempt refunded, interruption
# recorded. Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def give_back(conn: Connection, lease: Lease, error: Mapping[str, Any]) -> str | None:
    """Drain: pending again shortly, attempt refunded, interruption recorded, checkpoint kept.

    Returns the new state (``cancelled`` if an operator asked), None when the lease was lost."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    "state": JobState.PENDING,
                    "attempts": jobs.c.attempts - 1,
                    "run_at": after(RELEASE_HOLD),
                    "errors": errors_append(error),
                }
            )
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()


def return_unstarted(
    conn: Connection, worker: str, leases: Sequence[tuple[int, int]]
) -> dict[int, str]:
    """Give back prefetched jobs that never started: ``pending``, attempt refunded, no error.

    ``run_at`` is kept, so each job keeps its place in line (it is already due). Fenced on the
    leases like every finishing write; returns ``{id: new state}`` of the rows it changed
    (``cancelled`` where an operator asked).
    """
    if not leases:
        return {}
    rows = conn.execute(_RETURN_UNSTARTED, lease_params(worker, leases)).all()
    return {row.id: row.state for row in rows}


# return_unstarted: prefetched leased rows → pending, attempt refunded, run_at kept.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
_RETURN_UNSTARTED = (
    update(jobs)
    .where(FENCE_MANY)
    .values(**or_cancelled({"state": JobState.PENDING, "attempts": jobs.c.attempts - 1}))
    .returning(jobs.c.id, jobs.c.state)
)


def return_unheld(conn: Connection, worker: str, held: Sequence[int]) -> list[Any]:
    """Give back every row ``processing`` under ``worker`` that is not in ``held``: ``pending``,
    attempt refunded, ``run_at`` kept, no error entry.

    Such rows come from a claim whose COMMIT reached the server while the worker saw an error
    (a connection lost at commit, a failover): nothing of them ran. Left held, they would stay
    ``processing`` until their lease went stale, and a suspect the worker then ran "alone"
    would die beside them, counted in a gang and refunded again. Returns ``(id, state,
    batch_id)`` of the rows changed (``cancelled`` where an operator asked).
    """
    return list(conn.execute(_RETURN_UNHELD, {"worker": worker, "held": list(held)}))


# return_unheld: a worker's processing rows it does not hold → pending, attempt refunded, run_at
# kept. Index: ix_workerpool_jobs_claimed_by.
_RETURN_UNHELD = (
    update(jobs)
    # the state as a literal: the partial index is defined on it (a parameter would hide it
    # from a generic plan)
    .where(
        jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
        jobs.c.claimed_by == bindparam("worker", type_=Text),
        jobs.c.id != all_(bindparam("held", type_=ARRAY(BigInteger))),
    )
    .values(**or_cancelled({"state": JobState.PENDING, "attempts": jobs.c.attempts - 1}))
    .returning(jobs.c.id, jobs.c.state, jobs.c.batch_id)
)
