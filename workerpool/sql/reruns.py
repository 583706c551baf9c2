"""A job that ended runs again (``pool.rerun``): back from the history if it moved there,
locked, then put back in line with the steps the rerun keeps.

The row is read and locked (``FOR UPDATE``) in the transaction that rewrites it, so the state
the checks saw is the state that is rewritten: a concurrent rerun waits and then finds the job
live. Index: ix_workerpool_jobs_history_id (per partition, the restore),
pk_workerpool_finished_minutes, pk_workerpool_jobs.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from ..model.states import FINAL_STATES, JobState
from .history import COLUMNS, HISTORY, JOBS, MINUTES
from .schema import dependencies

_FINAL = ", ".join(f"'{state}'" for state in FINAL_STATES)

# restore: a finished row moved back from the history, its minute's count taken back.
_RESTORE = text(f"""
WITH back AS (
  DELETE FROM {HISTORY} WHERE id = :id AND state IN ({_FINAL}) RETURNING {COLUMNS}
), uncounted AS (
  UPDATE {MINUTES} AS m SET count = m.count - 1 FROM back
  WHERE m.minute = date_trunc('minute', back.finished_at) AND m.queue = back.queue
    AND m.state = back.state
)
INSERT INTO {JOBS} ({COLUMNS}) SELECT {COLUMNS} FROM back
""")


def restore(conn: Connection, job_id: int) -> bool:
    """Move finished job ``job_id`` back from the history; False if it is not there."""
    return conn.execute(_RESTORE, {"id": job_id}).rowcount == 1


_LOCK = text(f"""
SELECT id, queue, task, state, steps, attempts, batch_id, sequence, key, key_scope,
  EXISTS (SELECT 1 FROM {JOBS} AS h WHERE h.key = j.key AND h.id <> j.id
          AND h.state NOT IN ({_FINAL})) AS key_taken
FROM {JOBS} AS j WHERE id = :id FOR UPDATE
""")


def lock(conn: Connection, job_id: int) -> Any | None:
    """Job ``job_id`` (in the jobs table), locked until the transaction ends; whether a live
    job holds its key."""
    return conn.execute(_LOCK, {"id": job_id}).first()


# Parents (after=, sequence) that did not end done: the job's run would break their order.
# Index: pk_workerpool_job_dependencies, pk_workerpool_jobs.
_UNDONE_PARENTS = text(f"""
SELECT e.parent_id, p.state FROM {dependencies.name} AS e JOIN {JOBS} AS p ON p.id = e.parent_id
WHERE e.job_id = :id AND e.kind <> 'await' AND p.state <> '{JobState.DONE}'
ORDER BY e.parent_id LIMIT 1
""")


def undone_parent(conn: Connection, job_id: int) -> Any | None:
    """A parent of ``job_id`` (not an awaited job) that is not done, or None."""
    return conn.execute(_UNDONE_PARENTS, {"id": job_id}).first()


# rerun: the locked row → pending now, attempts reset, the kept steps, the rerun appended to
# its replays. Index: pk_workerpool_jobs.
_RERUN = text(f"""
UPDATE {JOBS} SET
  state = '{JobState.PENDING}', dead_reason = NULL, attempts = 0, run_at = now(),
  finished_at = NULL, claimed_by = NULL, claimed_at = NULL, cancel_request = NULL,
  result = NULL, crashes = 0, steps = CAST(:steps AS jsonb),
  replays = replays || jsonb_build_array(jsonb_build_object(
    'at', now(), 'by', CAST(:by AS text), 'rerun', true, 'from_step', CAST(:from_step AS text),
    'was', state, 'attempts', attempts, 'dead_reason', dead_reason,
    'finished_at', finished_at, 'cancelled', state = '{JobState.CANCELLED}'))
WHERE id = :id AND state IN ({_FINAL})
RETURNING id, queue, task, sequence
""")


def rerun(
    conn: Connection, job_id: int, steps: dict[str, Any] | None, from_step: str | None, by: str
) -> Any | None:
    """Put locked job ``job_id`` back in line with ``steps`` kept; its row, or None if it is
    no longer finished."""
    return conn.execute(
        _RERUN,
        {
            "id": job_id,
            "steps": None if steps is None else json.dumps(steps),
            "from_step": from_step,
            "by": by,
        },
    ).first()


__all__ = ["lock", "rerun", "restore", "undone_parent"]
