"""What ``workerpool.testing`` reads and writes for users' test suites: jobs matched by
their fields, the queues of given jobs (inline mode drains those), retries made due now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    func,
    select,
    text,
    update,
)

from ..model.states import DUE_STATES, JobState
from .schema import dependencies, jobs

# for users' test suites (workerpool.testing)

#: What ``workerpool.testing.enqueued`` can match on, each compared for equality.
MATCHABLE = ("queue", "state", "key", "payload", "priority", "max_attempts", "attempts")


# find_jobs: rows of one task (or any) whose fields equal ``match``, in id order.
# Index: uq_workerpool_jobs_key with a key; otherwise a scan (test databases are small).
def find_jobs(conn: Connection, task: str | None, match: Mapping[str, Any]) -> list[Any]:
    stmt = select(
        jobs.c.id,
        jobs.c.queue,
        jobs.c.task,
        jobs.c.payload,
        jobs.c.key,
        jobs.c.state,
        jobs.c.priority,
        jobs.c.attempts,
        jobs.c.max_attempts,
        jobs.c.run_at,
    ).order_by(jobs.c.id)
    if task is not None:
        stmt = stmt.where(jobs.c.task == task)
    for name, value in match.items():
        stmt = stmt.where(jobs.c[name] == value)  # payload: bound as jsonb, compared as jsonb
    return list(conn.execute(stmt))


# job_queues: the queues these jobs are in (inline mode drains those).
# Index: pk_workerpool_jobs.
def job_queues(conn: Connection, ids: Sequence[int]) -> list[str]:
    stmt = select(jobs.c.queue).where(jobs.c.id.in_(list(ids))).distinct().order_by(jobs.c.queue)
    return list(conn.execute(stmt).scalars())


# make_due: waiting rows → due now, so a test runs retries without their backoff.
# Index: pk_workerpool_jobs.
def make_due(conn: Connection, ids: Sequence[int]) -> int:
    stmt = (
        update(jobs)
        .where(jobs.c.id.in_(list(ids)), jobs.c.state.in_(list(DUE_STATES)))
        .values(run_at=func.now())
    )
    return conn.execute(stmt).rowcount


# The dependents of these jobs that are due now (released by them). Index: the parent index,
# pk_workerpool_jobs.
_DUE_DEPENDENTS = text(f"""
SELECT DISTINCT e.job_id FROM {dependencies.name} AS e JOIN {jobs.name} AS j ON j.id = e.job_id
WHERE e.parent_id = ANY(CAST(:ids AS bigint[])) AND j.state = '{JobState.PENDING}'
ORDER BY e.job_id
""")


def due_dependents(conn: Connection, ids: Sequence[int]) -> list[int]:
    """The dependents of ``ids`` their final outcomes released (inline mode runs them)."""
    if not ids:
        return []
    return list(conn.execute(_DUE_DEPENDENTS, {"ids": list(ids)}).scalars())
