"""An operator's actions on one job beyond cancel and retry: run a scheduled job now, purge a
dead job, and send the signal a waiting job waits for. Each checks its input before anything
is written and records its audit entry in the transaction of the change.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .. import sql
from ..client import WorkerPool, actor
from ..model.errors import InvalidFilter, UnknownJob, WrongState
from ..model.validation import check_ids
from ..sql import audit, control, history
from ..sql.control import run_now as run_now_sql
from . import dead


class NotScheduled(WrongState):
    """The job is not waiting for a time to come (run now changes nothing)."""


def run_now(pool: WorkerPool, job_id: int, *, by: str | None = None) -> datetime:
    """Make a pending (or retrying) job whose ``run_at`` is ahead due now; its queue's workers
    are woken. Returns the ``run_at`` it had. NotScheduled when it is not such a job."""
    [job_id] = check_ids([job_id])
    by = actor(by)
    with pool.engine.begin() as conn:
        row = run_now_sql(conn, job_id)
        if row is None:
            if sql.job_states(conn, [job_id]) == {}:
                raise UnknownJob(f"no job has id {job_id}")
            raise NotScheduled(f"job {job_id} is not scheduled for later: nothing changed")
        sql.notify(conn, [row.queue])
        audit.record(
            conn, by, "run_now", f"job {job_id}", {"run_at": row.was.isoformat(), "task": row.task}
        )
    return row.was


def retry_cancelled(pool: WorkerPool, job_id: int, *, by: str | None = None) -> None:
    """Put a cancelled job back in line: pending now, attempts reset, its errors kept and the
    retry appended to its ``replays``; from the history too, if it moved there. Refused
    (WrongState, nothing changed) for a batch member, a job waiting for others, or one whose
    key a newer job holds."""
    [job_id] = check_ids([job_id])
    by = actor(by)
    with pool.engine.begin() as conn:
        history.restore(conn, job_id)
        row = control.replay_cancelled(conn, job_id, by)
        if row is None:
            reason = control.why_not_replayed(conn, job_id)
            if reason is None:
                raise UnknownJob(f"no job has id {job_id}")
            raise WrongState(f"{reason}; nothing changed")
        sql.notify(conn, [row.queue])
        audit.record(conn, by, "retry", f"job {job_id}", {"was": "cancelled", "task": row.task})


def purge_one(pool: WorkerPool, job_id: int, *, by: str | None = None) -> None:
    """Delete one dead job (its row and logs), audited as a purge; WrongState if not dead."""
    [job_id] = check_ids([job_id])
    result = dead.purge(pool, timedelta(0), dead.DeadFilter(ids=(job_id,)), by=by)
    if result.count != 1:
        raise WrongState(f"job {job_id} is not dead: only a dead job is purged; nothing changed")


def send_signal(
    pool: WorkerPool, name: str, payload: Any = None, *, by: str | None = None
) -> datetime:
    """``pool.signal`` with its audit entry, in one transaction (SignalExists: nothing
    written)."""
    by = actor(by)
    with pool.engine.begin() as conn:
        sent_at = pool.signal(name, payload, conn=conn)
        audit.record(conn, by, "signal", f"signal {name}", {"payload": payload})
    return sent_at


def check_signal_payload(text: str | None) -> Any:
    """The payload a form gives as JSON text (empty: no payload)."""
    import json

    if text is None or not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidFilter(f"the payload is not valid JSON: {exc}") from None
