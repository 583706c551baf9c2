"""A job's key already held: who holds it, what a second enqueue gets, and expired periods.

The unique index ``uq_workerpool_jobs_key`` covers only the rows that hold their key
(``schema.KEY_HELD``): forever, while live, or for a period. Which of two enqueuers wins is the
index's decision; what is read here is only the winner, to tell the loser its id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, and_, func, literal_column, or_, select, text, update

from ..model.errors import DuplicateJob, IdempotencyConflict
from ..model.states import LIVE_STATES
from .planner import state_in
from .schema import KEY_HELD, jobs

_EXPIRED = and_(jobs.c.key_scope == literal_column("'for'"), jobs.c.key_expires_at <= func.now())


# holders: the jobs holding these keys now (an expired period still holds until released).
# Index: uq_workerpool_jobs_key.
def holders(conn: Connection, keys: Iterable[str]) -> dict[str, Any]:
    stmt = select(
        jobs.c.key,
        jobs.c.id,
        jobs.c.task,
        jobs.c.payload,
        jobs.c.state,
        jobs.c.key_scope,
        jobs.c.workflow_id,
        _EXPIRED.label("expired"),
    ).where(jobs.c.key.in_(sorted(set(keys))), text(KEY_HELD))
    return {row.key: row for row in conn.execute(stmt)}


def holds_its_key(row: Any) -> Any:
    """``schema.KEY_HELD`` for a row of ``row`` (an alias of the jobs table)."""
    return and_(
        row.c.key.isnot(None),
        or_(
            row.c.key_scope.is_(None),
            row.c.key_scope == literal_column("'for'"),
            and_(row.c.key_scope == literal_column("'live'"), state_in(*LIVE_STATES, table=row)),
        ),
    )


def holder(conn: Connection, key: str | None) -> Any:
    """The job holding ``key``, or None (it finished, or was pruned, since the insert)."""
    return holders(conn, [key]).get(key) if key is not None else None


# release_expired: a key whose period is over stops being held by its old job.
# Index: uq_workerpool_jobs_key.
def release_expired(conn: Connection, key: str) -> bool:
    """Free ``key`` if its holder's ``unique_for`` period is over; whether it was freed."""
    stmt = (
        update(jobs).where(jobs.c.key == key, text(KEY_HELD), _EXPIRED).values(key_scope="expired")
    )
    return conn.execute(stmt).rowcount == 1


def settle(row: Any, existing: Any) -> int:
    """What an enqueue whose key is held gets: the holder's id, DuplicateJob
    (``on_conflict="error"``), or IdempotencyConflict (a key held forever, reused with another
    task or payload: an idempotency key names one job)."""
    if existing is None:  # the holder finished or vanished between insert and read
        raise IdempotencyConflict(f"key {row.key!r} is held by a job that just disappeared; retry")
    if row.on_conflict == "error":
        raise DuplicateJob(row.key, existing.id, existing.state)
    if (
        row.key_scope is None
        and row.on_conflict == "keep"
        and (existing.task != row.task or existing.payload != json.loads(row.payload_json))
    ):
        raise IdempotencyConflict(
            f"key {row.key!r} already belongs to job {existing.id} ({existing.task}) "
            "with a different payload"
        )
    return existing.id
