"""A job whose worker was lost: its process died, or its lease went stale.

A process that dies holding several jobs cannot say which one killed it. So the cost of a death
is attributed: a job held alone is charged (its attempt stays spent, as for any failure); jobs
held together get their attempt back and become *suspects* (``crashes > 0``), which the claim
runs one at a time on a worker that holds nothing else. A suspect that then dies is alone, so it
is charged; a job that kills every process it runs in ends ``dead/abandoned`` after at most
``max_attempts + 1`` deaths, and its neighbours lose nothing.

The same values serve the three places that learn of a lost worker: the crash release of a
reaped process (``reclaim_from_dead_worker``), the recovery of stale leases each worker runs at
its renewal beat (``recover_stale``: a host that vanished), and the sweep of stale leases with
no attempts left (``sweep_abandoned``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Integer, Text

from ..model.notices import CancelNotice
from ..model.states import DeadReason, JobState
from .cancelled import or_cancelled
from .clock import seconds
from .schema import jobs
from .settled import after_rows

#: A job charged for a death waits ``CRASH_HOLD * 2**(its earlier solo deaths)`` seconds, at most
#: CRASH_HOLD_CAP, before it runs again: charged like any failure, it backs off, so other
#: suspects go first and a burst of deaths from outside (an operator's ``kill -9``, a node
#: draining) cannot spend all of one job's attempts within seconds.
CRASH_HOLD = 1.0
CRASH_HOLD_CAP = 60.0

#: The columns the recovery statements return for logging and dead-job notices.
_CHANGED = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.state,
    jobs.c.attempts,
    jobs.c.crashes,
    jobs.c.errors.op("->", return_type=JSONB)(-1).label("last_error"),
    jobs.c.batch_id,
)

#: Deaths this job already caused while running alone (its WorkerLost entries that say so).
_SOLO_DEATHS = literal_column(
    "(SELECT count(*) FROM jsonb_array_elements(workerpool_jobs.errors) AS e"
    " WHERE e->>'type' = 'WorkerLost' AND e->>'alone' = 'true')",
    Integer,
)


def recover(lost: Any, how: str) -> Any:
    """The UPDATE that attributes and resolves the rows of ``lost`` (a CTE of ``id, owner``).

    ``how`` says what happened to the owner, after its name ("died", "lease went stale"). Each
    owner's whole holding is counted (``gang``), not only the rows in ``lost``: a row held with
    others is a bystander until proven otherwise. Index: ix_workerpool_jobs_claimed_by.
    """
    gang = (
        select(
            jobs.c.claimed_by.label("owner"),
            func.count().label("n"),
            func.array_agg(jobs.c.id).label("ids"),
        )
        .where(
            jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
            jobs.c.claimed_by.in_(select(lost.c.owner)),
        )
        .group_by(jobs.c.claimed_by)
        .cte(f"{lost.name}_gang")
    )
    return (
        update(jobs)
        .where(jobs.c.id == lost.c.id, gang.c.owner == lost.c.owner)
        .values(**_lost_values(gang.c.owner, gang.c.n, gang.c.ids, how))
        .returning(*_CHANGED)
    )


def _times(count: Any) -> Any:
    return case(
        (count == 1, literal("once", Text)), else_=cast(count, Text) + literal(" times", Text)
    )


def _lost_values(owner: Any, held: Any, held_ids: Any, how: str) -> dict[str, Any]:
    """The new values of a row whose ``owner`` was lost while holding ``held`` rows."""
    alone = held <= 1
    exhausted = and_(alone, jobs.c.attempts >= jobs.c.max_attempts)
    lost = literal("worker ", Text) + owner + literal(f" {how}", Text)
    message = case(
        (
            exhausted,
            literal("killed its process ", Text)
            + _times(_SOLO_DEATHS + 1)
            + literal(" while running alone; gave up (", Text)
            + lost
            + literal(")", Text),
        ),
        (alone, lost + literal(" while running this job alone: the attempt counts", Text)),
        else_=lost
        + literal(" holding ", Text)
        + cast(held, Text)
        + literal(
            " jobs: which one killed it is unknown, so the attempt does not count and"
            " the job runs alone next (a suspect)",
            Text,
        ),
    )
    entry = func.jsonb_build_object(
        "attempt",
        jobs.c.attempts,
        "type",
        "WorkerLost",
        "worker",
        owner,
        "alone",
        alone,
        "with",
        func.to_jsonb(func.array_remove(held_ids, jobs.c.id)),
        "message",
        message,
        "at",
        func.now(),
    )
    hold = func.least(CRASH_HOLD_CAP, CRASH_HOLD * func.power(2.0, _SOLO_DEATHS))
    return or_cancelled(
        {  # .value: plain str parameters (a CASE types values by Python type)
            "state": case((exhausted, JobState.DEAD.value), else_=JobState.PENDING.value),
            "run_at": case(
                (and_(alone, ~exhausted), func.now() + func.make_interval(0, 0, 0, 0, 0, 0, hold)),
                else_=jobs.c.run_at,
            ),
            "dead_reason": case((exhausted, DeadReason.ABANDONED.value), else_=None),
            "finished_at": case((exhausted, func.now()), else_=None),
            "attempts": case((alone, jobs.c.attempts), else_=jobs.c.attempts - 1),
            "crashes": jobs.c.crashes + 1,
            "errors": jobs.c.errors.op("||")(func.jsonb_build_array(entry)),
        }
    )


# reclaim_from_dead_worker: a dead process's rows → pending (suspects when it held several),
# or dead/abandoned. Index: ix_workerpool_jobs_claimed_by.
def reclaim_from_dead_worker(conn: Connection, worker: str) -> list[Any]:
    """A process died: attribute the death to what it held (see the module's docstring).

    Returns ``(id, queue, task, state, attempts, crashes, last_error, batch_id)`` of every row
    changed. The caller passes the rows of its whole transaction to ``settled.after_rows``.
    """
    lost = (
        select(jobs.c.id, jobs.c.claimed_by.label("owner"))
        .where(
            jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
            jobs.c.claimed_by == bindparam("owner", worker, type_=Text),
        )
        .with_for_update()
        .cte("lost")
    )
    return list(conn.execute(recover(lost, "died")))


#: Stale leases one recovery statement takes at most (it repeats at the next renewal beat).
RECOVER_BATCH = 1000


def _stale_leases(queue: str, stale_after: float, *, exhausted: bool) -> Any:
    """A queue's leases not renewed for ``stale_after``, with attempts left or none."""
    attempts = (
        jobs.c.attempts >= jobs.c.max_attempts
        if exhausted
        else jobs.c.attempts < jobs.c.max_attempts
    )
    return (
        select(jobs.c.id, jobs.c.claimed_by.label("owner"))
        .where(
            jobs.c.queue == queue,
            jobs.c.state == literal_column(f"'{JobState.PROCESSING}'"),
            jobs.c.claimed_at < func.now() - bindparam("stale_after", seconds(stale_after)),
            attempts,
        )
        .order_by(jobs.c.claimed_at)
        .limit(RECOVER_BATCH)
        .with_for_update(skip_locked=True)
        .cte("lost")
    )


# recover_stale: a queue's stale leases with attempts left → pending, attributed to their lost
# worker (suspects when it held several). Index: ix_workerpool_jobs_leased.
class Recovered(NamedTuple):
    """The rows a recovery changed, and the dependents cancelled because one of them ended
    (for the caller to report once committed)."""

    rows: list[Any]
    cancelled: list[CancelNotice]


def recover_stale(conn: Connection, queue: str, stale_after: float) -> Recovered:
    """Leases not renewed for ``stale_after``: their worker is lost (a host gone). Exhausted ones
    are the sweep's; these go back to ``pending``, to run alone."""
    lost = _stale_leases(queue, stale_after, exhausted=False)
    rows = list(conn.execute(recover(lost, "lease went stale")))
    # a cancel asked meanwhile ends a row here
    return Recovered(rows, after_rows(conn, rows).cancelled)


# sweep_abandoned: a queue's stale leases with no attempts left → dead/abandoned when held
# alone, a suspect with its attempt back when held with others. Index: ix_workerpool_jobs_leased.
def sweep_abandoned(conn: Connection, queue: str, stale_after: float) -> Recovered:
    """Stale leases the claim will never take (no attempts left): attribute and resolve them."""
    lost = _stale_leases(queue, stale_after, exhausted=True)
    rows = list(conn.execute(recover(lost, "lease went stale")))
    # dead/abandoned rows may end their batch and cancel their dependents
    return Recovered(rows, after_rows(conn, rows).cancelled)
