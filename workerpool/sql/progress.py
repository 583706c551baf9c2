"""A running job's progress (``job.progress``): one fenced UPDATE of its row.

The stored value is ``{"value", "attempt", "at"}``: what the handler reported, the attempt that
reported it and the database clock. Fenced on the lease like a checkpoint: a process that lost
its lease writes nothing. Index: pk_workerpool_jobs (the fence).
"""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, cast, func, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Text

from ..model.job import Lease
from .leases import fence
from .schema import jobs

_VALUE = cast(bindparam("progress", type_=Text), JSONB)


def save_progress(conn: Connection, lease: Lease, value_json: str) -> bool:
    """Store ``value_json`` as the job's progress; False when the lease was lost."""
    stmt = (
        update(jobs)
        .where(fence(lease))
        .values(
            progress=func.jsonb_build_object(
                "value", _VALUE, "attempt", jobs.c.attempts, "at", func.now()
            )
        )
    )
    return conn.execute(stmt, {"progress": value_json}).rowcount == 1
