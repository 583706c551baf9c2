"""The dead-letter queue as operators work it: which dead rows a filter matches, listed,
counted, replayed (pending again, attempts reset, lineage kept) and purged."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    bindparam,
    exists,
    func,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from ..model.states import JobState
from .job_logs import delete_logs
from .schema import jobs
from .tags import carries
from .unique_keys import holds_its_key


def dead_where(
    *,
    queue: str | None = None,
    task: str | None = None,
    reason: str | None = None,
    since: datetime | timedelta | None = None,
    older_than: timedelta | None = None,
    ids: Sequence[int] | None = None,
    tags: Sequence[str] | None = None,
    key: str | None = None,
):
    """The WHERE clause selecting dead rows by the operator's filters (all optional, ANDed).

    The state is a literal, not a bind parameter: it must match the dead index's predicate in
    every plan, generic ones included, or listing the dead becomes a scan of the history.
    """
    clauses = [jobs.c.state == literal_column(f"'{JobState.DEAD}'")]
    if queue is not None:
        clauses.append(jobs.c.queue == queue)
    if task is not None:
        clauses.append(jobs.c.task == task)
    if reason is not None:
        clauses.append(jobs.c.dead_reason == reason)
    if isinstance(since, timedelta):
        clauses.append(jobs.c.finished_at >= func.now() - bindparam("since_age", since))
    elif since is not None:
        clauses.append(jobs.c.finished_at >= bindparam("since", since))
    if older_than is not None:
        clauses.append(jobs.c.finished_at < func.now() - bindparam("older_than", older_than))
    if ids is not None:
        clauses.append(jobs.c.id == func.any(bindparam("ids", list(ids), type_=ARRAY(BigInteger))))
    if tags:
        clauses.append(carries(tags))
    if key is not None:
        clauses.append(jobs.c.key == key)
    return and_(*clauses)


DEAD_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.task,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.dead_reason,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.key,
    jobs.c.created_at,
    jobs.c.finished_at,
    jobs.c.replays,
    jobs.c.tags,
    func.jsonb_array_length(jobs.c.errors).label("error_count"),
    jobs.c.errors.op("->")(-1).label("last_error"),
)


# list_dead: matching dead rows, newest first. Index: ix_workerpool_jobs_dead (read newest
# first, up to the limit); pk_workerpool_jobs when ids are given.
def list_dead(conn: Connection, where, limit: int | None) -> list[Any]:
    """Dead rows matching ``where``, most recently dead first (errors: count and last only)."""
    stmt = select(*DEAD_COLUMNS).where(where).order_by(jobs.c.finished_at.desc(), jobs.c.id.desc())
    return list(conn.execute(stmt.limit(limit) if limit else stmt))


# count_dead: how many dead rows match.
# Index: ix_workerpool_jobs_dead (index-only: the filters are its columns), pk_workerpool_jobs.
def count_dead(conn: Connection, where) -> int:
    return conn.execute(select(func.count()).select_from(jobs).where(where)).scalar_one()


# dead_ids: the matching dead rows' ids, ascending.
# Index: ix_workerpool_jobs_dead, pk_workerpool_jobs with ids.
def dead_ids(conn: Connection, where) -> list[int]:
    return list(conn.execute(select(jobs.c.id).where(where).order_by(jobs.c.id)).scalars())


# dead_tasks: matching dead rows counted per task.
# Index: ix_workerpool_jobs_dead, pk_workerpool_jobs with ids.
def dead_tasks(conn: Connection, where) -> dict[str, int]:
    """How many matching dead rows each task has."""
    stmt = select(jobs.c.task, func.count()).where(where).group_by(jobs.c.task)
    return {task: count for task, count in conn.execute(stmt)}


# replay_dead: dead rows → pending now, attempts reset, lineage appended. Index: pk_workerpool_jobs.
def replay_dead(conn: Connection, ids: Sequence[int], by: str) -> list[Any]:
    """Dead rows back to ``pending`` now with attempts reset; errors kept; lineage appended.

    Each row's ``replays`` gets ``{at, attempts, dead_reason, finished_at, by}``. Rows that are no
    longer dead are left alone (replaying twice is a no-op), and so are rows whose ``live`` key
    a newer job holds (live again, the key would have two holders). Returns ``(id, queue,
    task, sequence)`` replayed.
    """
    holder = jobs.alias("holder")
    key_taken = and_(
        jobs.c.key_scope == literal_column("'live'"),
        exists(
            select(holder.c.id).where(
                holder.c.key == jobs.c.key, holder.c.id != jobs.c.id, holds_its_key(holder)
            )
        ),
    )
    entry = func.jsonb_build_object(
        "at",
        func.now(),
        "attempts",
        jobs.c.attempts,
        "dead_reason",
        jobs.c.dead_reason,
        "finished_at",
        jobs.c.finished_at,
        "by",
        literal(by, Text),
    )
    stmt = (
        update(jobs)
        .where(dead_where(ids=ids), ~key_taken)
        .values(
            state=JobState.PENDING,
            dead_reason=None,
            attempts=0,
            run_at=func.now(),
            finished_at=None,
            claimed_by=None,
            claimed_at=None,
            replays=jobs.c.replays.op("||")(func.jsonb_build_array(entry)),
        )
        .returning(jobs.c.id, jobs.c.queue, jobs.c.task, jobs.c.sequence)
    )
    return list(conn.execute(stmt))


# purge_dead: delete these rows if still dead, and their attempt logs. Indexes:
# pk_workerpool_jobs, ix_workerpool_job_logs_job_id.
def purge_dead(conn: Connection, ids: Sequence[int]) -> list[int]:
    """Delete these rows if they are still dead (and their attempt logs); returns the ids."""
    stmt = jobs.delete().where(dead_where(ids=ids)).returning(jobs.c.id)
    purged = list(conn.execute(stmt).scalars())
    if purged:
        delete_logs(conn, purged)
    return purged
