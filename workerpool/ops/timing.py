"""How long a job waited and how long it ran, read from its row: ``run_at`` (when it became
due), ``started_at`` (when its current or last attempt was claimed: every claim sets it) and
``finished_at``. ``claimed_at`` is no measure of either: each lease renewal restamps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model.states import JobState

#: States whose row's started_at is of an attempt that ended with the row.
ENDED = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)


@dataclass(frozen=True)
class Timing:
    """Seconds, or None where the row does not say (never started, not due yet)."""

    waited: float | None  # from due to the start of its attempt (or to now, if it still waits)
    ran: float | None  # from the start of its attempt to its end (or to now, if it runs)
    waiting: bool  # waited is still growing: it is due and not running
    running: bool  # ran is still growing


def timing(job: Any, now: datetime) -> Timing:
    started = getattr(job, "started_at", None)
    if job.state in (JobState.PENDING, JobState.FAILED):
        waited = (now - job.run_at).total_seconds() if job.run_at <= now else None
        return Timing(waited, None, waited is not None, False)
    if started is None or job.state == JobState.WAITING:
        return Timing(None, None, False, False)
    waited = max(0.0, (started - job.run_at).total_seconds())
    if job.state == JobState.PROCESSING:
        return Timing(waited, max(0.0, (now - started).total_seconds()), False, True)
    ended = job.finished_at if job.state in ENDED else None
    ran = max(0.0, (ended - started).total_seconds()) if ended is not None else None
    return Timing(waited, ran, False, False)
