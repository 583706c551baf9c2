"""A job's result: written by the completing UPDATE, read back, and waited for.

The worker's batched completion (:func:`complete_settling`) writes each job's result beside its
lease (a third array: NULL where the handler returned None, so a batch without results is the
plain statement) and returns, for every row it finished, what follows a final outcome needs
(:mod:`.settled`): the row's batch, and whether a caller waits for it. Both come back from the
same statement: the plain path gains no round trip.

A caller waiting in ``pool.result`` lists the job in ``workerpool_waiters``; the transaction that
settles a listed job sends one NOTIFY on :data:`RESULTS_CHANNEL` (and deletes the rows): nobody
waits, nothing is sent. Whether anyone waits at all is one probe of that (nearly always empty)
table per statement, an InitPlan; only then is each finished row looked up in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    and_,
    bindparam,
    case,
    cast,
    delete,
    exists,
    false,
    func,
    insert,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import Text

from ..model.states import FINAL_STATES, JobState
from .compiled import driver_sql
from .leases import FENCE_MANY, lease_params
from .schema import history, jobs, waiters

#: The channel that tells waiting callers that jobs they wait for settled (payload: the ids,
#: comma-separated, or ``*`` when too many to list: every waiter then reads its job again).
RESULTS_CHANNEL = "workerpool_results"
#: NOTIFY payloads are limited to 8000 bytes; a longer list of ids is sent as ``*``.
_PAYLOAD_ROOM = 7900


class Settled(NamedTuple):
    """A row that just reached a final state: its batch (None: none), and whether a caller
    waits for it (None: unknown, look it up)."""

    id: int
    batch_id: int | None
    awaited: bool | None
    #: Whether a job names it as a parent (``has_dependents``; None: unknown, look it up).
    dependents: bool | None = None


def _awaited(job_id: Any) -> Any:
    """Whether a caller waits for ``job_id``: one probe of the (nearly always empty) waiters
    table per statement, and a lookup per row only when it holds anything."""
    anyone = select(exists().select_from(waiters)).scalar_subquery()
    return case((anyone, exists().where(waiters.c.job_id == job_id)), else_=false())


# ---------------------------------------------------------------------------------------------
# the completing write


_RESULT_IDS = bindparam("lease_ids", type_=ARRAY(BigInteger))
_WITH_RESULTS = (
    func.unnest(
        _RESULT_IDS,
        bindparam("lease_attempts", type_=ARRAY(Integer)),
        bindparam("lease_results", type_=ARRAY(Text)),
    )
    .table_valued("id", "attempt", "result")
    .render_derived(name="lease")
)
#: FENCE_MANY over three arrays: the lease, and the result to write with it.
_FENCE_WITH_RESULTS = and_(
    jobs.c.id == func.any(_RESULT_IDS),
    jobs.c.id == _WITH_RESULTS.c.id,
    jobs.c.attempts == _WITH_RESULTS.c.attempt,
    jobs.c.state == JobState.PROCESSING,
    jobs.c.claimed_by == bindparam("lease_worker", type_=Text),
)


def _complete_statement(with_results: bool) -> Any:
    values: dict[str, Any] = {"state": JobState.DONE, "finished_at": func.now()}
    if with_results:
        values["result"] = cast(_WITH_RESULTS.c.result, JSONB)
    done = (
        update(jobs)
        .where(_FENCE_WITH_RESULTS if with_results else FENCE_MANY)
        .values(**values)
        .returning(jobs.c.id, jobs.c.batch_id, jobs.c.has_dependents)
        .cte("done")
    )
    return select(
        done.c.id, done.c.batch_id, _awaited(done.c.id).label("awaited"), done.c.has_dependents
    )


# complete_settling: leased rows → done, with their results; returns (id, batch_id, awaited,
# has_dependents).
# Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by).
_COMPLETE = {False: _complete_statement(False), True: _complete_statement(True)}


def complete_settling(
    conn: Connection, worker: str, leases: Sequence[tuple[int, int, str | None]]
) -> list[Settled]:
    """Mark ``(job_id, attempt, result JSON or None)`` leases done in one statement, each with
    its result; returns the rows that applied (the others lost their lease) as :class:`Settled`.
    A batch without any result is the plain statement (no third array)."""
    if not leases:
        return []
    params = lease_params(worker, [(job_id, attempt) for job_id, attempt, _ in leases])
    with_results = any(result is not None for _, _, result in leases)
    if with_results:
        params["lease_results"] = [result for _, _, result in leases]
    sql, defaults = driver_sql(conn.dialect, _COMPLETE[with_results])
    rows = conn.exec_driver_sql(sql, {**defaults, **params}).all()
    # by position (the statement returns Settled's fields in order): a Row's attribute costs
    # fifteen times its index, and this runs for every job a worker finishes
    return list(map(Settled._make, rows))


# settled_rows: the batch of these rows, and whether a caller waits for each. Index:
# pk_workerpool_jobs (and ix_workerpool_waiters_job_id).
def settled_rows(conn: Connection, ids: Sequence[int]) -> list[Settled]:
    """What :func:`complete_settling` returns, for rows another write finished (dead,
    cancelled): one statement, only on the path that has such rows."""
    if not ids:
        return []
    stmt = select(
        jobs.c.id, jobs.c.batch_id, _awaited(jobs.c.id).label("awaited"), jobs.c.has_dependents
    ).where(jobs.c.id == func.any(bindparam("ids", list(ids), type_=ARRAY(BigInteger))))
    return [
        Settled(row.id, row.batch_id, row.awaited, row.has_dependents) for row in conn.execute(stmt)
    ]


# ---------------------------------------------------------------------------------------------
# waking the waiters


# notify_waiters: the waiters of these jobs are told (one NOTIFY) and forgotten.
# Index: ix_workerpool_waiters_job_id.
_NOTIFY_WAITERS = text(f"""
WITH gone AS (
  DELETE FROM {waiters.name} WHERE job_id = ANY(CAST(:ids AS bigint[])) RETURNING job_id
), listed AS (
  SELECT string_agg(DISTINCT job_id::text, ',') AS ids FROM gone
)
SELECT pg_notify(:channel, CASE WHEN length(ids) > {_PAYLOAD_ROOM} THEN '*' ELSE ids END)
FROM listed WHERE ids IS NOT NULL
""")


def notify_waiters(conn: Connection, job_ids: Sequence[int]) -> None:
    """Wake the callers waiting for any of ``job_ids`` when this transaction commits (nothing is
    sent when none waits). A hint only: waiters also poll."""
    if job_ids:
        conn.execute(_NOTIFY_WAITERS, {"ids": list(job_ids), "channel": RESULTS_CHANNEL})


# add_waiter: a caller starts waiting for a job. Index: pk_workerpool_waiters.
def add_waiter(conn: Connection, job_id: int) -> int:
    return conn.execute(insert(waiters).values(job_id=job_id).returning(waiters.c.id)).scalar_one()


# remove_waiter: a caller stops waiting (the job's settlement may have removed it already).
# Index: pk_workerpool_waiters.
def remove_waiter(conn: Connection, waiter_id: int) -> None:
    conn.execute(delete(waiters).where(waiters.c.id == waiter_id))


# prune_waiters: rows of callers that died waiting, once old. Index: none (a small table).
def prune_waiters(conn: Connection, older_than: float) -> int:
    stmt = delete(waiters).where(
        waiters.c.since < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, older_than)
    )
    return conn.execute(stmt).rowcount


# ---------------------------------------------------------------------------------------------
# reading


#: What ``pool.job`` and ``pool.result`` read of a job.
JOB_INFO_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.state,
    jobs.c.dead_reason,
    jobs.c.result,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.errors,
    jobs.c.key,
    jobs.c.batch_id,
    jobs.c.created_at,
    jobs.c.run_at,
    jobs.c.finished_at,
    jobs.c.payload,
    jobs.c.priority,
    jobs.c.claimed_by,
    jobs.c.claimed_at,
)

# read_job: one job as pool.job shows it, in the jobs table or moved to the history (one
# statement: one snapshot, so a move never hides it). Index: pk_workerpool_jobs, then
# ix_workerpool_jobs_history_id per partition.
_JOB_ID = bindparam("job_id", type_=BigInteger)
_READ_JOB = union_all(
    select(*JOB_INFO_COLUMNS).where(jobs.c.id == _JOB_ID),
    select(*(history.c[c.name] for c in JOB_INFO_COLUMNS)).where(history.c.id == _JOB_ID),
).limit(1)


def read_job(conn: Connection, job_id: int) -> Any:
    """The row (see :data:`JOB_INFO_COLUMNS`), or None when no job has this id (or it was
    pruned, or its history partition dropped)."""
    return conn.execute(_READ_JOB, {"job_id": job_id}).first()


__all__ = [
    "FINAL_STATES",
    "JOB_INFO_COLUMNS",
    "RESULTS_CHANNEL",
    "Settled",
    "add_waiter",
    "complete_settling",
    "notify_waiters",
    "prune_waiters",
    "read_job",
    "remove_waiter",
    "settled_rows",
]
