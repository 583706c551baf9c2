"""The fences every write to a claimed row goes through, on the row's lease
(:class:`~workerpool.model.job.Lease`).

A lease is ``claimed_by`` plus ``attempts``: each claim counts an attempt, so a process that lost
its lease (reclaimed after it went stale, or released when its process died) no longer matches,
and its late write changes nothing and reports so.

The planner finds fenced rows by primary key (``pk_workerpool_jobs``) or, when the worker
holds few rows, through ``ix_workerpool_jobs_claimed_by``: both go straight to the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, and_, bindparam, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from ..model.job import Lease
from ..model.states import JobState
from .schema import jobs


def fence(lease: Lease):
    """One row, still ``processing`` under this lease."""
    return and_(
        jobs.c.id == lease.job_id,
        jobs.c.state == JobState.PROCESSING,
        jobs.c.claimed_by == lease.worker,
        jobs.c.attempts == lease.attempt,
    )


#: ``(job_id, attempt)`` leases as two array parameters: one statement text whatever the batch
#: size (prepared once, nothing to build per call), instead of one bound pair per lease.
_LEASE_IDS = bindparam("lease_ids", type_=ARRAY(BigInteger))
_LEASES = (
    func.unnest(_LEASE_IDS, bindparam("lease_attempts", type_=ARRAY(Integer)))
    .table_valued("id", "attempt")
    .render_derived(name="lease")
)
#: Many rows of one worker, each still ``processing`` under its lease; fill the parameters with
#: :func:`lease_params`.
FENCE_MANY = and_(
    jobs.c.id == func.any(_LEASE_IDS),  # the primary key can find them, however many are held
    jobs.c.id == _LEASES.c.id,
    jobs.c.attempts == _LEASES.c.attempt,
    jobs.c.state == JobState.PROCESSING,
    jobs.c.claimed_by == bindparam("lease_worker", type_=Text),
)


def lease_params(worker: str, leases: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The parameters of :data:`FENCE_MANY` for ``worker``'s ``(job_id, attempt)`` leases."""
    return {
        "lease_worker": worker,
        "lease_ids": [job_id for job_id, _ in leases],
        "lease_attempts": [attempt for _, attempt in leases],
    }
