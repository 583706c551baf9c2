"""``job.wait_for_job``: a running job that awaits another one waits for it as a dependent.

The awaiting job's wait is one outcome write (:func:`wait`), in the worker's outcome flush like
a signal's wait: the awaited job is locked and marked ``has_dependents`` first, as ``after=``
marks a parent at enqueue, then the awaiting row is written, fenced on its lease: ``waiting``
(attempt refunded, ``run_at`` its deadline, the await a step begun) with an ``await`` edge to
the awaited job, or ``pending`` at once if that job has already ended. Either the awaited job's
final write comes after this commit and, waiting on the lock, sees the flag (its transaction
releases the new dependent, ``sql.settled``), or it came before and this write reads the job
ended: no wake-up is missed, and none needs a poller. The edge's ``if_failed`` is ``run``: an
awaited job that ends dead or cancelled makes the awaiting job due like one that is done, and
its handler gets the failure raised.

The lock is taken with ``SKIP LOCKED``: an outcome flush never waits here, so two flushes that
each complete the job the other one awaits cannot deadlock. A locked awaited job (its own final
write, a lease renewal or a cancel is in flight) makes the awaiting job due again shortly
(:data:`RECHECK` seconds), to read it afresh: a replay of its handler, never a missed wake-up.

A deadline is the maintenance sweep's (:func:`sweep`): a job still waiting past it is made due
and its await edges to live jobs are dropped, so its handler records the timeout and a later
await is not held by the job it gave up on.

Index: the lease fence (pk_workerpool_jobs or ix_workerpool_jobs_claimed_by) and
pk_workerpool_jobs (the awaited job); the sweep reads ix_workerpool_jobs_waiting, then each
job's edges (pk_workerpool_job_dependencies).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, cast, func, select, text, update
from sqlalchemy.types import Text

from ..model.awaits import AWAIT, AwaitedRead, stored_outcome
from ..model.dependencies import RUN
from ..model.errors import MAX_DELAY
from ..model.job import Lease
from ..model.states import LIVE_STATES, JobState
from .cancelled import or_cancelled
from .enqueue import NOTIFY_CHANNEL
from .leases import fence
from .outcomes import after
from .results import read_job
from .schema import TZ, dependencies, jobs
from .steps import NULL, with_step

EDGES = dependencies.name
JOBS = jobs.name
_LIVE = ", ".join(f"'{state}'" for state in LIVE_STATES)


# read_awaited: the awaited job (live or moved to the history) and whether the await's deadline
# passed. Index: pk_workerpool_jobs, ix_workerpool_jobs_history_id.
_EXPIRED = select(func.now() >= cast(bindparam("deadline", type_=Text), TZ))


def read_awaited(conn: Connection, job_id: int, deadline: str | None) -> AwaitedRead:
    """Job ``job_id`` as ``wait_for_job`` reads it; ``deadline``: the await's stored deadline
    (an ISO timestamp, None: no limit), compared with the database clock."""
    row = read_job(conn, job_id)
    expired = deadline is not None and bool(conn.execute(_EXPIRED, {"deadline": deadline}).scalar())
    if row is None:
        return AwaitedRead(found=False, expired=expired)
    return AwaitedRead(found=True, outcome=stored_outcome(row), expired=expired)


#: Seconds after which a job whose awaited job was locked reads it again.
RECHECK = 1.0

# lock_awaited: the awaited job locked and marked, unless another transaction holds it.
# Index: pk_workerpool_jobs.
_LOCK_AWAITED = text(f"""
WITH locked AS (SELECT id FROM {JOBS} WHERE id = :id FOR NO KEY UPDATE SKIP LOCKED)
UPDATE {JOBS} AS j SET has_dependents = true FROM locked WHERE j.id = locked.id
RETURNING j.state
""")


# The await edge, once the awaiting row waits. Index: pk_workerpool_job_dependencies.
_EDGE = text(f"""
INSERT INTO {EDGES} (job_id, parent_id, kind, if_failed)
VALUES (:job_id, :awaited, '{AWAIT}', '{RUN}')
ON CONFLICT DO NOTHING
""")


def wait(
    conn: Connection, lease: Lease, awaited: int, name: str, timeout: float | None
) -> str | None:
    """``job.wait_for_job`` found job ``awaited`` live: the job waits for it (see the module
    header). A wait an earlier run began keeps its deadline.

    Returns the new state (``cancelled`` if an operator asked), None when the lease was lost."""
    seen = conn.execute(_LOCK_AWAITED, {"id": awaited}).scalar()
    live = seen in LIVE_STATES  # None: locked elsewhere (or moved, ended): read it again
    begun = jobs.c.steps.op("->")(name)
    deadline = func.coalesce(
        cast(begun.op("->>")("deadline"), TZ), after(MAX_DELAY if timeout is None else timeout)
    )
    entry = func.jsonb_build_object(
        "kind",
        AWAIT,
        "job",
        awaited,
        "value",
        NULL,
        "attempt",
        jobs.c.attempts,
        "started_at",
        func.now(),
        "deadline",
        NULL if timeout is None else deadline,
    )
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            **or_cancelled(
                {
                    "state": JobState.WAITING if live else JobState.PENDING,
                    "run_at": deadline if live else after(0.0 if seen else RECHECK),
                    "attempts": jobs.c.attempts - 1,
                    "crashes": 0,  # an ordinary outcome: no longer a suspect
                    "steps": with_step(func.coalesce(begun, entry), name),
                }
            )
        )
        .returning(jobs.c.state)
    )
    state = conn.execute(stmt).scalar()
    if state == JobState.WAITING:
        conn.execute(_EDGE, {"job_id": lease.job_id, "awaited": awaited})
    return state


# sweep: awaiting jobs past their deadline → pending now, their edges to live jobs dropped.
# Index: ix_workerpool_jobs_waiting (every waiting job), pk_workerpool_job_dependencies.
_SWEEP = text(f"""
WITH expired AS (
  SELECT w.id FROM {JOBS} AS w
  WHERE w.state = '{JobState.WAITING}' AND w.signal IS NULL AND w.run_at <= now()
    AND EXISTS (SELECT 1 FROM {EDGES} AS e WHERE e.job_id = w.id AND e.kind = '{AWAIT}')
  ORDER BY w.id LIMIT :limit
  FOR UPDATE OF w SKIP LOCKED),
dropped AS (
  DELETE FROM {EDGES} AS e USING expired AS x
  WHERE e.job_id = x.id AND e.kind = '{AWAIT}'
    AND EXISTS (SELECT 1 FROM {JOBS} AS p WHERE p.id = e.parent_id AND p.state IN ({_LIVE}))
  RETURNING e.job_id),
due AS (
  UPDATE {JOBS} AS j SET state = '{JobState.PENDING}', run_at = now()
  FROM expired AS x WHERE j.id = x.id
  RETURNING j.queue),
counted AS (SELECT queue, count(*) AS n FROM due GROUP BY queue),
notified AS MATERIALIZED (
  SELECT pg_notify('{NOTIFY_CHANNEL}', string_agg(queue, ',')) FROM counted
  HAVING count(*) > 0)
SELECT queue, n, (SELECT count(*) FROM notified) AS sent, (SELECT count(*) FROM dropped) AS d
FROM counted
""")


def sweep(conn: Connection, limit: int = 1000) -> dict[str, int]:
    """Jobs awaiting a job past their ``wait_for_job`` deadline: due again now (their handler
    then raises ``TimeoutError``). Returns ``{queue: jobs made due}`` and wakes their workers."""
    return {row.queue: int(row.n) for row in conn.execute(_SWEEP, {"limit": limit})}


def awaiting(conn: Connection, job_id: int) -> list[Any]:
    """The jobs that await job ``job_id`` now (id, task, state). Index: the parent index."""
    return list(conn.execute(_AWAITING, {"id": job_id}))


_AWAITING = text(f"""
SELECT j.id, j.task, j.state FROM {EDGES} AS e JOIN {JOBS} AS j ON j.id = e.job_id
WHERE e.parent_id = :id AND e.kind = '{AWAIT}' ORDER BY j.id LIMIT 100
""")


__all__ = ["awaiting", "read_awaited", "sweep", "wait"]
