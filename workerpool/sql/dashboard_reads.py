"""What the web dashboard reads: job lists by keyset, one job whole, finishes per minute, and
counts that stay bounded on a table of millions (capped exact counts, or the planner's estimate).

Nothing here writes: the dashboard's actions call the same operations as the command line
(:mod:`workerpool.ops.dead`, ``pool.cancel``, ``pool.pause``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    text,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import JSONB

from ..model.states import PRUNED_STATES
from .schema import history, jobs, workers
from .tags import carries

#: Matching rows counted at most by :func:`count_capped`: past it the page says "N+".
COUNT_CAP = 10_000
#: Finished rows read at most for the throughput chart: past it the chart is a lower bound.
FINISHED_CAP = 20_000


@dataclass(frozen=True)
class JobFilter:
    """The jobs list's filters (every field optional; all are ANDed). Checked by the caller."""

    queue: str | None = None
    task: str | None = None
    state: str | None = None
    dead_reason: str | None = None
    key: str | None = None
    created_after: datetime | timedelta | None = None
    created_before: datetime | timedelta | None = None
    by_finished: bool = False  # the time range is of finished_at (the dead letters), not created_at
    tags: tuple[str, ...] | None = None  # jobs carrying every one of them
    payload: dict[str, Any] | None = None  # jobs whose payload contains it (JSON containment)
    batch_id: int | None = None  # the members of one batch
    workflow_id: int | None = None  # the jobs of one workflow

    @property
    def reads_history(self) -> bool:
        """Whether matching rows may have moved to the history (done or cancelled ones)."""
        return (
            not self.by_finished
            and self.dead_reason is None
            and self.state in (None, *PRUNED_STATES)
        )

    @property
    def narrows(self) -> bool:
        """Whether it filters on more than the queue (the state aside)."""
        return any(
            getattr(self, name) is not None
            for name in (
                "task",
                "dead_reason",
                "key",
                "created_after",
                "created_before",
                "tags",
                "payload",
                "batch_id",
                "workflow_id",
            )
        )

    def where(self, table: Any = jobs) -> Any:
        """The clause on ``table``: the jobs table, or the history (the same columns)."""
        clauses = [_carries(table, self.tags)] if self.tags else []
        if self.payload:
            clauses.append(
                table.c.payload.op("@>")(bindparam("filter_payload", self.payload, type_=JSONB))
            )
        for name in ("queue", "task", "state", "dead_reason", "key", "batch_id", "workflow_id"):
            value = getattr(self, name)
            if value is not None:
                clauses.append(table.c[name] == value)
        moment = table.c.finished_at if self.by_finished else table.c.created_at
        if self.created_after is not None:
            clauses.append(moment >= _moment(self.created_after, "after"))
        if self.created_before is not None:
            clauses.append(moment < _moment(self.created_before, "before"))
        return and_(true(), *clauses)


def _carries(table: Any, tags: tuple[str, ...]) -> Any:
    return (
        carries(tags)
        if table is jobs
        else table.c.tags.op("@>")(bindparam("filter_tags", list(tags), type_=jobs.c.tags.type))
    )


def _moment(value: datetime | timedelta, name: str) -> Any:
    """A time, or a duration back from the database clock."""
    if isinstance(value, timedelta):
        return func.now() - bindparam(f"created_{name}_age", value)
    return bindparam(f"created_{name}", value)


def list_columns(table: Any = jobs) -> tuple[Any, ...]:
    return (
        table.c.id,
        table.c.queue,
        table.c.task,
        table.c.state,
        table.c.dead_reason,
        table.c.priority,
        table.c.attempts,
        table.c.max_attempts,
        table.c.key,
        table.c.run_at,
        table.c.created_at,
        table.c.finished_at,
        table.c.claimed_by,
        table.c.tags,
        table.c.progress,
        table.c.errors.op("->")(-1).op("->>")("type").label("last_error_type"),
        table.c.errors.op("->")(-1).op("->>")("message").label("last_error_message"),
    )


LIST_COLUMNS = list_columns(jobs)


# browse_all: one page of the rows matching ``filters`` in the jobs table and the history
# together, newest id first after a keyset cursor: each table's own page, then the newest of
# both. Index: pk_workerpool_jobs read backwards from the cursor; in the history, each
# partition's ix_workerpool_jobs_history_id the same way, merged (Merge Append), each stopping
# at the page size (a filter matching few rows reads further).
def browse_all(
    conn: Connection, filters: JobFilter, before_id: int | None, limit: int
) -> list[Any]:
    """Up to ``limit`` rows matching ``filters`` with an id below ``before_id``, wherever
    they are (finished ones move to the history a minute after they end)."""
    if not filters.reads_history:
        return browse_jobs(conn, filters.where(), before_id, limit, filters.by_finished)
    pages = []
    for table in (jobs, history):
        page = select(*list_columns(table)).where(filters.where(table))
        if before_id is not None:
            page = page.where(table.c.id < bindparam("before_id", before_id))
        pages.append(page.order_by(table.c.id.desc()).limit(limit).subquery())
    both = union_all(*(select(page) for page in pages)).subquery()
    return list(conn.execute(select(both).order_by(both.c.id.desc()).limit(limit)))


# count_all: matching rows in the jobs table and the history, each read up to ``cap`` + 1.
# Index: as browse_all.
def count_all(conn: Connection, filters: JobFilter, cap: int = COUNT_CAP) -> int:
    """Matching rows up to ``cap + 1`` (above ``cap``: "more than cap")."""
    total = count_capped(conn, filters.where(), cap)
    if filters.reads_history and total <= cap:
        total += count_capped(conn, filters.where(history), cap, history)
    return min(total, cap + 1)


# matching_ids: the ids and states of the rows matching ``where`` in ``states`` (in the jobs
# table: the history holds no live or dead row), up to job ``upto``, oldest first, reading at
# most ``cap`` + 1. Index: pk_workerpool_jobs (or the filter's own, as browse_jobs).
def matching_ids(
    conn: Connection, where: Any, states: Sequence[str], upto: int | None, cap: int
) -> list[Any]:
    stmt = select(jobs.c.id, jobs.c.state, jobs.c.task).where(where, jobs.c.state.in_(list(states)))
    if upto is not None:
        stmt = stmt.where(jobs.c.id <= bindparam("upto", upto))
    return list(conn.execute(stmt.order_by(jobs.c.id).limit(cap + 1)))


# browse_jobs: one page of matching rows after a keyset cursor (never OFFSET): newest id first,
# or (``by_finished``, the dead letters) most recently finished first, as list_dead orders them.
# Index: pk_workerpool_jobs read backwards from the cursor, stopping at the page size (a filter
# matching few rows reads further); by_finished: ix_workerpool_jobs_finished the same way; a key
# filter uses uq_workerpool_jobs_key.
def browse_jobs(
    conn: Connection, where: Any, before_id: int | None, limit: int, by_finished: bool = False
) -> list[Any]:
    """Up to ``limit`` rows matching ``where`` that come after job ``before_id`` in the order."""
    stmt = select(*LIST_COLUMNS).where(where)
    if by_finished:
        stmt = stmt.where(jobs.c.finished_at.isnot(None))
        order = (jobs.c.finished_at.desc(), jobs.c.id.desc())
        key = tuple_(jobs.c.finished_at, jobs.c.id)
        after = select(jobs.c.finished_at, jobs.c.id).where(jobs.c.id == before_id)
        cursor = after.scalar_subquery()
    else:
        order, key, cursor = (jobs.c.id.desc(),), jobs.c.id, before_id
    if before_id is not None:
        stmt = stmt.where(key < cursor)
    return list(conn.execute(stmt.order_by(*order).limit(limit)))


# limit_time: a statement timeout for the rest of this transaction (SET LOCAL). Index: none.
_LIMIT_TIME = text("SELECT set_config('statement_timeout', :timeout, true)")


def limit_time(conn: Connection, seconds: float) -> None:
    conn.execute(_LIMIT_TIME, {"timeout": f"{max(1, round(seconds * 1000))}ms"})


# count_capped: how many rows match, counting at most ``cap`` + 1. Index: as browse_jobs.
def count_capped(conn: Connection, where: Any, cap: int = COUNT_CAP, table: Any = jobs) -> int:
    """Matching rows up to ``cap + 1`` (a result above ``cap`` means "more than cap")."""
    inner = select(literal_column("1")).select_from(table).where(where).limit(cap + 1).subquery()
    return conn.execute(select(func.count()).select_from(inner)).scalar_one()


# job_detail: every column of one job, and the database clock; a job not in the jobs table is
# read from the history (a move commits whole: if the first read missed it, the second sees it).
# Index: pk_workerpool_jobs, then ix_workerpool_jobs_history_id per partition.
def job_detail(conn: Connection, job_id: int) -> Any | None:
    for table in (jobs, history):
        stmt = select(table, func.now().label("now")).where(table.c.id == job_id)
        row = conn.execute(stmt).first()
        if row is not None:
            return row
    return None


# lease_holder: the registered process holding a lease. Index: pk_workerpool_workers.
def lease_holder(conn: Connection, worker_id: str) -> Any | None:
    age = func.extract("epoch", func.now() - workers.c.last_seen).label("age")
    return conn.execute(select(workers, age).where(workers.c.id == worker_id)).first()


# finished_per_minute: rows that finished (done, cancelled, dead) per minute, queue and state
# over the last ``minutes``: those still in the jobs table, reading at most ``cap`` of them,
# newest first (``moved`` false), and the history's from its finished minutes (``moved``
# true: one row per minute, queue and state, however many moved). Index:
# ix_workerpool_jobs_finished (a backward range scan from now, stopped at the cap),
# pk_workerpool_finished_minutes (a range of minutes).
_FINISHED = text(
    """
    SELECT date_trunc('minute', f.finished_at) AS minute, f.queue, f.state, count(*) AS count,
           false AS moved
    FROM (SELECT finished_at, queue, state FROM workerpool_jobs
          WHERE state IN ('done', 'cancelled', 'dead')
            AND finished_at >= now() - make_interval(mins => :minutes)
          ORDER BY finished_at DESC LIMIT :cap) AS f
    GROUP BY 1, 2, 3
    UNION ALL
    SELECT minute, queue, state, count, true FROM workerpool_finished_minutes
    WHERE minute >= date_trunc('minute', now() - make_interval(mins => :minutes))
    """
)


def finished_per_minute(conn: Connection, minutes: int, cap: int = FINISHED_CAP) -> list[Any]:
    """``(minute, queue, state, count, moved)``, a (minute, queue, state) possibly twice (once
    per table): the rows not ``moved`` adding up to ``cap`` mean the jobs table held more in
    the window than were read (its oldest minutes are then undercounted)."""
    return list(conn.execute(_FINISHED, {"minutes": minutes, "cap": cap}))


# moved_counts: how many finished rows the history holds, by queue and state, from the counts
# the mover keeps per minute (never a read of the history). Index: none (a scan of
# workerpool_finished_minutes: one row per minute, queue and state over the retention).
_MOVED_COUNTS = text(
    "SELECT queue, state, sum(count)::bigint AS count FROM workerpool_finished_minutes"
    " GROUP BY queue, state"
)


def moved_counts(conn: Connection) -> dict[tuple[str, str], int]:
    return {(row.queue, row.state): int(row.count) for row in conn.execute(_MOVED_COUNTS)}


# common_queues: the queue names the table's statistics know (most common values of the column).
# Index: none (pg_stats, no table read).
_COMMON_QUEUES = text(
    "SELECT unnest(most_common_vals::text::text[]) FROM pg_stats"
    " WHERE tablename = 'workerpool_jobs' AND attname = 'queue'"
    " AND schemaname = current_schema()"
)


def common_queues(conn: Connection) -> set[str]:
    return set(conn.execute(_COMMON_QUEUES).scalars())


# last_analyzed: when the jobs table's statistics were last gathered. Index: none (catalog).
_LAST_ANALYZED = text(
    "SELECT greatest(last_analyze, last_autoanalyze) FROM pg_stat_user_tables"
    " WHERE relname = 'workerpool_jobs' AND schemaname = current_schema()"
)


def last_analyzed(conn: Connection) -> datetime | None:
    return conn.execute(_LAST_ANALYZED).scalar()
