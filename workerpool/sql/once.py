"""A job ended in its handler's own transaction (``job.complete_in``): the fenced completion,
what follows it, and the reads that tell the worker whether that transaction committed.

The completion is the worker's completing write for one row, with one more condition: no cancel
was asked (a cancel ends a job ``cancelled`` whatever its handler does, so the handler's effect
must not commit beside a ``done``). It runs in the caller's transaction, and what follows a final
outcome (dependents released, waiters woken, batches finished: :mod:`.settled`) runs there too,
so the effect, the ``done`` and its consequences commit together or not at all. The row stays
locked by that transaction until it ends: a renewal or a recovery of it waits, then finds it
``done`` and leaves it.

Index: the lease fence (pk_workerpool_jobs).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Connection, and_, bindparam, cast, exists, func, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Text

from ..model.job import Lease
from ..model.states import JobState
from .cancelled import ASKED
from .leases import fence
from .results import Settled
from .schema import jobs
from .settled import Followed, after_final


def complete_in(conn: Connection, lease: Lease, result_json: str | None) -> Followed | None:
    """Write ``done`` (and the result) on the leased row in ``conn``'s transaction, then what
    follows; returns what followed, or None when the lease is gone or a cancel was asked
    (nothing written)."""
    stmt = (
        update(jobs)
        .where(fence(lease), ~ASKED)
        .values(
            state=JobState.DONE,
            finished_at=func.now(),
            result=cast(bindparam("result", result_json, type_=Text), JSONB),
        )
        .returning(jobs.c.id, jobs.c.batch_id, jobs.c.has_dependents)
    )
    row = conn.execute(stmt).first()
    if row is None:
        return None
    return after_final(conn, [Settled(row.id, row.batch_id, None, row.has_dependents)])


class Holder(NamedTuple):
    """Who holds a row now, for a refusal's message: its state, lease and whether a cancel was
    asked (None when no such row is on this database)."""

    state: str
    claimed_by: str | None
    attempts: int
    cancel_asked: bool


def holder(conn: Connection, job_id: int) -> Holder | None:
    """The row's state and lease. Index: pk_workerpool_jobs."""
    stmt = select(jobs.c.state, jobs.c.claimed_by, jobs.c.attempts, ASKED).where(
        jobs.c.id == job_id
    )
    row = conn.execute(stmt).first()
    return None if row is None else Holder(*row)


def committed(conn: Connection, lease: Lease) -> bool:
    """Whether the row is ``done`` under ``lease``: a handler's transaction that called
    ``complete_in`` committed (no other write ends a row ``done`` and keeps its lease).
    Index: pk_workerpool_jobs."""
    done_here = and_(
        jobs.c.id == lease.job_id,
        jobs.c.state == JobState.DONE,
        jobs.c.claimed_by == lease.worker,
        jobs.c.attempts == lease.attempt,
    )
    return bool(conn.execute(select(exists().where(done_here))).scalar())


#: Which server and database a connection is on: a completion on another one is refused.
_WHERE = select(func.current_database(), func.inet_server_addr(), func.inet_server_port())


def database_identity(conn: Connection) -> tuple[Any, ...]:
    return tuple(conn.execute(_WHERE).one())


__all__ = ["Holder", "committed", "complete_in", "database_identity", "holder"]
