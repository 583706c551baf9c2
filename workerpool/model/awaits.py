"""Awaiting another job inside a handler: ``job.wait_for_job(job_id, timeout=None)``.

The await is a durable step named ``await:<id>``. The first time, the awaited job is read: if it
has ended, its outcome is stored as the step's value and returned (its result, or its failure
raised as ``pool.result`` raises it). If it is live, the handler leaves with
:class:`~.steps.Suspended` and the job goes to ``waiting`` holding no worker slot, with an
``await`` edge to the awaited job; that job's final write makes it due again (the dependency
machinery, :mod:`workerpool.sql.awaits`), and the handler runs from the top, replaying its
steps, until this call finds the awaited job ended.

Nothing here touches the database: the runtime's step store reads the awaited job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidJob, JobCancelled, JobFailed
from .results import check_id
from .states import JobState

#: The kind of an await step (and of its edge, ``model.dependencies.AWAIT``).
AWAIT = "await"
#: How many of the awaited job's error entries its stored outcome keeps (the last ones): enough
#: for ``JobFailed`` to say why, small enough to stay far below the payload limit.
ERRORS_KEPT = 1


def step_name(job_id: int) -> str:
    """The step that records the await of ``job_id``."""
    return f"{AWAIT}:{job_id}"


def check_awaited(value: Any, own_id: int) -> int:
    """A job id to await: a positive int, not the awaiting job's own."""
    job_id = check_id(value)
    if job_id == own_id:
        raise InvalidJob(f"job {own_id} cannot await itself")
    return job_id


@dataclass(frozen=True)
class AwaitedRead:
    """What the step store found for an awaited job: whether it exists, its outcome as stored
    once it has ended (:func:`stored_outcome`; None while it is live), and whether the await's
    deadline has passed on the database clock."""

    found: bool
    outcome: dict[str, Any] | None = None
    expired: bool = False


def stored_outcome(row: Any) -> dict[str, Any] | None:
    """The outcome of an ended job as its await step stores it; None for a live job."""
    if row.state not in (JobState.DONE, JobState.DEAD, JobState.CANCELLED):
        return None
    return {
        "job": row.id,
        "state": str(row.state),
        "result": row.result if row.state == JobState.DONE else None,
        "dead_reason": row.dead_reason,
        "errors": list(row.errors or [])[-ERRORS_KEPT:],
    }


def outcome(value: dict[str, Any]) -> Any:
    """What ``wait_for_job`` gives for a stored outcome: the result, or the failure raised."""
    if value["state"] == JobState.DEAD:
        raise JobFailed(value["job"], value.get("dead_reason"), value.get("errors") or [])
    if value["state"] == JobState.CANCELLED:
        raise JobCancelled(value["job"], value.get("errors") or [])
    return value.get("result")


def timed_out(job_id: int) -> TimeoutError:
    return TimeoutError(f"wait for job {job_id} timed out")


__all__ = [
    "AWAIT",
    "AwaitedRead",
    "check_awaited",
    "outcome",
    "step_name",
    "stored_outcome",
    "timed_out",
]
