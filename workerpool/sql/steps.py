"""Durable steps on a claimed row: a finished step written, and a sleep (the job snoozed with its
sleep recorded as a step in the same write).

A job's steps are one ``jsonb`` object on its row (``steps``: name → entry), read by the claim
with the rest of the row: a job without steps carries a NULL and pays nothing. Each write is
fenced on the lease like a checkpoint, so a process that lost its lease can never record a
step. Every time in an entry comes from the database clock; a step's start is the database's
``now()`` less how long the step ran (a monotonic duration measured by the worker).

Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Interval, bindparam, cast, func, literal, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Text

from ..model.job import Lease
from ..model.states import JobState
from ..model.steps import SLEEP
from .cancelled import or_cancelled
from .clock import seconds
from .leases import fence
from .outcomes import after
from .schema import TZ, jobs

_NAME = bindparam("step_name", type_=Text)
#: The job's steps so far (an empty object before the first).
STEPS = func.coalesce(jobs.c.steps, cast(literal("{}", Text), JSONB))
#: JSON null (a bound None would have no type for jsonb_build_object).
NULL = cast(literal("null", Text), JSONB)
#: The stored entry of the step being written, if an earlier run began it (a wait).
_EARLIER = jobs.c.steps.op("->")(_NAME)


def with_step(entry: Any, name: Any = _NAME) -> Any:
    """``steps || {name: entry}``."""
    return STEPS.op("||")(func.jsonb_build_object(name, entry))


# record_step: one finished step on one leased row. Built once: a handler thread writes it per
# step, and the lease's values are bound per call.
_ENTRY = func.jsonb_build_object(
    "kind",
    bindparam("kind", type_=Text),
    "value",
    cast(bindparam("value", type_=Text), JSONB),
    "attempt",
    jobs.c.attempts,
    "started_at",
    func.coalesce(
        cast(_EARLIER.op("->>")("started_at"), TZ),
        func.now() - bindparam("elapsed", type_=Interval),
    ),
    "finished_at",
    func.now(),
).op("||")(cast(bindparam("extra", type_=Text), JSONB))


def record_step(
    conn: Connection,
    lease: Lease,
    name: str,
    kind: str,
    value_json: str,
    elapsed: float,
    *,
    timed_out: bool = False,
) -> dict[str, Any] | None:
    """Write step ``name`` (``value_json``: its JSON value) as finished, fenced on ``lease``;
    returns the entry written, or None when the lease was lost (nothing written).

    A step that an earlier run began (a wait) keeps its start; a timed-out wait says so."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(steps=with_step(_ENTRY))
        .returning(jobs.c.steps.op("->")(_NAME))
    )
    return conn.execute(
        stmt,
        {
            "step_name": name,
            "kind": kind,
            "value": value_json,
            "elapsed": seconds(elapsed),
            "extra": '{"timed_out": true}' if timed_out else "{}",
        },
    ).scalar()


# sleep: one leased row → pending at now()+delay, attempt refunded, the sleep a finished step.
def sleep(conn: Connection, lease: Lease, name: str, delay: float) -> str | None:
    """``job.sleep``: pending again at ``now()+delay`` with the attempt given back (a snooze),
    and the sleep written as a step that finishes when the job is due again.

    Returns the new state (``cancelled`` if an operator asked), None when the lease was lost."""
    wake = after(delay)
    entry = func.jsonb_build_object(
        "kind",
        SLEEP,
        "value",
        NULL,
        "attempt",
        jobs.c.attempts,
        "started_at",
        func.now(),
        "finished_at",
        wake,
    )
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    "state": JobState.PENDING,
                    "attempts": jobs.c.attempts - 1,
                    "run_at": wake,
                    "crashes": 0,  # an ordinary outcome: no longer a suspect
                    "steps": with_step(entry, name),
                }
            )
        )
        .returning(jobs.c.state)
    )
    return conn.execute(stmt).scalar()
