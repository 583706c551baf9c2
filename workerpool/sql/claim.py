"""A job is taken and held: the wake-up LISTEN, the claim, lease renewal and checkpoints."""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Integer, Text

from ..model.limits import ClaimLimits
from ..model.states import DUE_STATES, JobState
from .compiled import driver_sql
from .enqueue import NOTIFY_CHANNEL
from .leases import FENCE_MANY, Lease, fence, lease_params
from .limits_claim import limited_claim_statement, lock_queue
from .planner import one_of
from .schema import jobs

# LISTEN: subscribe a listener connection to the wake-up notifications. Index: none, no table.
#: A hint only: workers also poll.
LISTEN = f"LISTEN {NOTIFY_CHANNEL}"

#: Columns a worker needs to run a claimed job (not the error history: it can be large).
CLAIM_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.key,
    jobs.c.checkpoint,
    jobs.c.run_at,
    jobs.c.claimed_at,
    jobs.c.crashes,  # above 0: a suspect, to run alone
    jobs.c.trace_context,  # the parent of the run span (workerpool.tracing)
    jobs.c.batch_id,  # job.batch_id: a member's batch, or the batch a callback reports on
    jobs.c.steps,  # durable steps an earlier run finished (NULL for a job without any)
)


def _state_in(*states: JobState):
    """``state IN (...)`` with the states written as literals, not parameters.

    The partial indexes are defined on these literals. A parameter would hide them from a
    generic plan, so PostgreSQL would plan the prepared claim afresh on every call (~0.2 ms,
    more than executing it); with literals it reuses one plan.
    """
    assert set(states) <= set(JobState), states  # constants of this module, never input
    values = [literal_column(f"'{state}'") for state in states]
    return jobs.c.state == values[0] if len(values) == 1 else jobs.c.state.in_(values)


#: The plain claim's size, a parameter of its own: one statement, built and compiled once,
#: serves every size (a worker's free room changes from pass to pass).
CLAIM_LIMIT = "claim_limit"


# claim: take due rows in claim order (one suspect alone, or ordinary jobs), attempt counted,
# lease stamped. Index: ix_workerpool_jobs_suspects (suspect arm), ix_workerpool_jobs_due (due
# arm), then pk_workerpool_jobs (the update).
def claim_statement(
    *,
    queue: str,
    worker: str,
    limit: int,
    task_versions: Mapping[str, int],
    alone: bool = False,
    limits: ClaimLimits | None = None,
    shared: bool = False,
):
    """DESIGN §3: one UPDATE fed by CTE-fenced ``SKIP LOCKED`` arms, each on its own index.

    A worker that holds nothing (``alone``) takes one suspect if one is due, and then nothing
    else; a worker holding jobs never takes a suspect. Stale leases are not taken here but
    recovered by ``recovery.recover_stale`` at each worker's renewal beat: a lost worker's rows
    must be attributed (its whole holding counted) and then run alone, never inside a batch.
    With ``limits`` (a limited queue), the claim of :mod:`.limits_claim`, to be run after
    ``lock_queue`` in the same transaction.
    """
    known = _known(task_versions)
    if limits:
        return limited_claim_statement(
            queue=queue,
            worker=worker,
            limit=limit,
            limits=limits,
            alone=alone,
            shared=shared,
            known=lambda table: _known(task_versions, table),
            columns=(*CLAIM_COLUMNS, jobs.c.concurrency_key),
        )
    size = bindparam(CLAIM_LIMIT, limit, type_=Integer)  # one statement for every size
    due = _due_arm(queue, known, size, suspects=False)
    if alone:
        suspect = _due_arm(queue, known, 1, suspects=True)
        arms = union_all(
            select(suspect.c.id), select(due.c.id).where(~exists(select(suspect.c.id)))
        )
        picked = arms.limit(size).cte("picked")
    else:
        picked = due
    return (
        update(jobs)
        .where(one_of(picked))
        .values(
            state=JobState.PROCESSING,
            attempts=jobs.c.attempts + 1,
            claimed_by=worker,
            claimed_at=func.now(),
            # when this attempt started (claimed_at moves with each renewal): waited and ran
            started_at=func.now(),
        )
        .returning(*CLAIM_COLUMNS)
    )


def _known(task_versions: Mapping[str, int], table: Any = jobs) -> Any:
    """Rows this worker can run: a task it knows, a payload version it knows, attempts left."""
    return and_(
        table.c.task == func.any(bindparam("tasks", list(task_versions), type_=ARRAY(Text))),
        table.c.payload_version <= case(dict(task_versions), value=table.c.task, else_=literal(0)),
        table.c.attempts < table.c.max_attempts,
    )


def _due_arm(queue: str, known: Any, limit: Any, *, suspects: bool) -> Any:
    """Due rows in claim order: ordinary ones, or suspects (literals keep the partial index)."""
    crashes = (
        jobs.c.crashes > literal_column("0")
        if suspects
        else (jobs.c.crashes == literal_column("0"))
    )
    return (
        select(jobs.c.id)
        .where(
            jobs.c.queue == queue,
            _state_in(*DUE_STATES),
            jobs.c.run_at <= func.now(),
            crashes,
            known,
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("suspect" if suspects else "due")
    )


def claim(
    conn: Connection,
    *,
    queue: str,
    worker: str,
    limit: int,
    task_versions: Mapping[str, int],
    alone: bool = False,
    limits: ClaimLimits | None = None,
    key_cursor: str = "",
    shared: bool = False,
) -> list[Any]:
    """Claim up to ``limit`` rows for ``worker``; returns them with attempts already counted.

    ``alone``: the worker holds no job, so it may take a suspect (then nothing else).
    ``limits``: the queue's limits; then ``conn`` must be in a transaction (the queue's claim
    lock is held until it ends, and the counts are taken after it is granted), and each row
    also has its ``concurrency_key``. ``key_cursor``: where a per-key claim's key spread
    resumes (``sql.limits_keys``); the greatest key the worker's previous claim took.
    ``shared``: claim under the shared lock (see ``limits_claim.lock_queue``), when the
    previous claim's rows said the limits were out of the fleet's reach (``limits_safe``).
    """
    if limit <= 0 or not task_versions:
        return []
    versions = tuple(sorted(task_versions.items()))
    limits = limits or None
    shared = shared and limits is not None and not limits.keys
    # a limited claim's size shapes its statement (the key walk's length); the plain one's is
    # a parameter
    size = limit if limits is not None else 1
    statement = _claim_statement_for(queue, worker, size, versions, alone, limits, shared)
    sql, params = driver_sql(conn.dialect, statement)
    if limits is None:
        params = {**params, CLAIM_LIMIT: limit}
    else:
        lock_queue(conn, queue, shared=shared)
        if limits.keys:
            params = {**params, "key_cursor": key_cursor}
    result = conn.exec_driver_sql(sql, params)
    rows = result.all()
    return list(map(_claimed_row(tuple(result.keys()))._make, rows)) if rows else []


@functools.lru_cache(maxsize=16)
def _claimed_row(columns: tuple[str, ...]) -> Any:
    """A claimed row as a named tuple. A job's columns are read some twenty-five times on its
    way to the handler (the buffer's order, its lease, its ``Job``), and a SQLAlchemy ``Row``'s
    attribute costs about 0.24 µs against 0.014 µs for a named tuple's (timed on CPython 3.11,
    SQLAlchemy 2.1). Converting each row once costs about 0.3 µs; it cut a draining worker's
    CPU per job by a quarter (docs/benchmarks.md, "Claimed rows as named tuples")."""
    return namedtuple("ClaimedRow", columns)  # type: ignore[misc]


@functools.lru_cache(maxsize=256)
def _claim_statement_for(
    queue: str,
    worker: str,
    limit: int,
    versions: tuple[tuple[str, int], ...],
    alone: bool,
    limits: ClaimLimits | None,
    shared: bool,
):
    """A worker claims with the same arguments on every pass: build the expression once.

    Building it costs about 0.5 ms of Python per call (most of a claim's client-side time);
    statements are immutable, so one object serves every thread of the process.
    """
    return claim_statement(
        queue=queue,
        worker=worker,
        limit=limit,
        task_versions=dict(versions),
        alone=alone,
        limits=limits,
        shared=shared,
    )


def renew(conn: Connection, worker: str, leases: Sequence[tuple[int, int]]) -> set[int]:
    """Extend the leases still held by ``worker``; returns the ids renewed."""
    return renew_reading_cancels(conn, worker, leases)[0]


def renew_reading_cancels(
    conn: Connection, worker: str, leases: Sequence[tuple[int, int]]
) -> tuple[set[int], set[int]]:
    """Extend the leases still held; returns the ids renewed and those an operator cancelled.

    The renewal is how a cancel reaches a worker that gets no notifications (PgBouncer).
    """
    if not leases:
        return set(), set()
    rows = conn.execute(_RENEW, lease_params(worker, leases)).all()
    return {row.id for row in rows}, {row.id for row in rows if row.cancelled}


# renew: restamp claimed_at on the leases still held; say which ones have a cancel request.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
_RENEW = (
    update(jobs)
    .where(FENCE_MANY)
    .values(claimed_at=func.now())
    .returning(jobs.c.id, jobs.c.cancel_request.isnot(None).label("cancelled"))
)


# save_checkpoint: durable progress on one leased row.
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
def save_checkpoint(conn: Connection, lease: Lease, checkpoint_json: str) -> bool:
    """Durable progress for the job, written only while the lease holds."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(checkpoint=cast(literal(checkpoint_json, Text), JSONB))
    )
    return conn.execute(stmt).rowcount == 1
