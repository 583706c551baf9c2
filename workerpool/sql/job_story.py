"""One job's whole record for `workerpool job show`: the row in the jobs table or moved to the
history, with what ``pool.job`` leaves out (steps, tags, progress, workflow, start time)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, select, union_all

from .schema import history, jobs

STORY_COLUMNS = (
    "id",
    "queue",
    "task",
    "state",
    "dead_reason",
    "payload",
    "result",
    "attempts",
    "max_attempts",
    "errors",
    "key",
    "batch_id",
    "workflow_id",
    "priority",
    "tags",
    "progress",
    "steps",
    "created_at",
    "run_at",
    "started_at",
    "claimed_at",
    "claimed_by",
    "finished_at",
)

# read: one snapshot of both tables, so a move never hides the job. Index: pk_workerpool_jobs,
# then ix_workerpool_jobs_history_id per partition.
_JOB_ID = bindparam("job_id", type_=BigInteger)
_READ = union_all(
    select(*(jobs.c[name] for name in STORY_COLUMNS)).where(jobs.c.id == _JOB_ID),
    select(*(history.c[name] for name in STORY_COLUMNS)).where(history.c.id == _JOB_ID),
).limit(1)


def read(conn: Connection, job_id: int) -> Any:
    """The job's row, or None when no job has this id (or it was pruned)."""
    return conn.execute(_READ, {"job_id": job_id}).first()
