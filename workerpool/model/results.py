"""A job as ``pool.job`` reads it, and the checks of what ``pool.result`` is given.

:class:`JobInfo` is what a read of one job answers (never waiting); :meth:`JobInfo.outcome` is
``pool.result``'s answer for a job that has ended: its handler's return value, or its failure
raised (:class:`~.errors.JobFailed`, :class:`~.errors.JobCancelled`). The reading and the
waiting are :mod:`workerpool.client.results`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import InvalidJob, JobCancelled, JobFailed
from .states import FINAL_STATES, JobState


@dataclass(frozen=True)
class JobInfo:
    """A job as ``pool.job`` reads it (never waits). ``result`` is what its handler returned
    (None until it is ``done``, or when it returned None); ``errors`` its error history."""

    id: int
    queue: str
    task: str
    state: str
    result: Any
    attempts: int
    max_attempts: int
    errors: list[Any]
    dead_reason: str | None
    key: str | None
    batch_id: int | None
    created_at: datetime
    run_at: datetime
    finished_at: datetime | None
    #: What the job was enqueued with, and its latest claim (framework integrations read them).
    payload: Any = None
    priority: int = 0
    claimed_by: str | None = None
    claimed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """Whether the job has ended (done, dead or cancelled)."""
        return self.state in FINAL_STATES

    @classmethod
    def of(cls, row: Any) -> JobInfo:
        return cls(
            id=row.id,
            queue=row.queue,
            task=row.task,
            state=row.state,
            result=row.result,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            errors=row.errors,
            dead_reason=row.dead_reason,
            key=row.key,
            batch_id=row.batch_id,
            created_at=row.created_at,
            run_at=row.run_at,
            finished_at=row.finished_at,
            payload=row.payload,
            priority=row.priority,
            claimed_by=row.claimed_by,
            claimed_at=row.claimed_at,
        )

    def outcome(self) -> Any:
        """The result of a finished job, or its failure raised."""
        if self.state == JobState.DEAD:
            raise JobFailed(self.id, self.dead_reason, self.errors)
        if self.state == JobState.CANCELLED:
            raise JobCancelled(self.id, self.errors)
        return self.result


def check_id(value: Any, what: str = "job id") -> int:
    """A job (or batch) id: a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJob(f"{what} must be a positive int, got {value!r}")
    return value


def check_timeout(value: Any) -> float | None:
    """Seconds to wait: a finite number >= 0, or None to wait for as long as it takes."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidJob(f"timeout must be a finite number of seconds >= 0 or None, got {value!r}")
    return float(value)


__all__ = ["JobInfo", "check_id", "check_timeout"]
