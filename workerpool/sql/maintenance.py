"""Upkeep around the jobs: the registry of live worker processes, cron schedules, pruning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert

from ..model.states import PRUNED_STATES
from .clock import seconds
from .planner import state_in
from .schema import cron, jobs, workers

# ---------------------------------------------------------------------------------------------
# live worker processes


# register_worker: insert a booting process's row (or refresh it). Index: pk_workerpool_workers.
def register_worker(
    conn: Connection,
    worker: str,
    *,
    host: str,
    pid: int,
    queue: str,
    tasks: Mapping[str, int],
    capacity: int | None = None,
) -> None:
    """A child process announces itself (one row per process boot), with the number of jobs it
    may hold at once if it claims (``capacity``)."""
    stmt = insert(workers).values(
        id=worker, host=host, pid=pid, queue=queue, tasks=dict(tasks), capacity=capacity
    )
    conn.execute(
        stmt.on_conflict_do_update(index_elements=[workers.c.id], set_={"last_seen": func.now()})
    )


# beat_worker: restamp a process's last_seen. Index: pk_workerpool_workers.
def beat_worker(conn: Connection, worker: str) -> bool:
    """The process is alive; returns False if its row was pruned (it should re-register)."""
    stmt = update(workers).where(workers.c.id == worker).values(last_seen=func.now())
    return conn.execute(stmt).rowcount == 1


# unregister_worker: delete an exiting process's row. Index: pk_workerpool_workers.
def unregister_worker(conn: Connection, worker: str) -> None:
    conn.execute(workers.delete().where(workers.c.id == worker))


# prune_workers: delete the rows of processes not seen for a while. Index: none (one row per
# process: a small table, scanned).
def prune_workers(conn: Connection, older_than: float) -> list[str]:
    """Forget processes not seen for ``older_than`` seconds; returns their ids."""
    stmt = (
        workers.delete()
        .where(workers.c.last_seen < func.now() - bindparam("older", seconds(older_than)))
        .returning(workers.c.id)
    )
    return list(conn.execute(stmt).scalars())


# ---------------------------------------------------------------------------------------------
# cron schedules


# ensure_crons: insert the schedule rows not seen before. Index: pk_workerpool_cron.
def ensure_crons(conn: Connection, specs: Sequence[tuple[str, str, str, str]]) -> None:
    """Create the schedule row of each ``(name, queue, expression, timezone)`` not seen before."""
    if not specs:
        return
    rows = [{"name": n, "queue": q, "expression": e, "timezone": tz} for n, q, e, tz in specs]
    conn.execute(insert(cron).values(rows).on_conflict_do_nothing(index_elements=[cron.c.name]))


# lock_crons: lock the free schedule rows, with their last job's state. Index: pk_workerpool_cron,
# then pk_workerpool_jobs (the last job).
def lock_crons(conn: Connection, names: Sequence[str]) -> list[Any]:
    """Lock the schedule rows no other scheduler holds; each comes with its last job's state.

    ``SKIP LOCKED``: a row another replica is scheduling right now is its business this pass.
    """
    locked = (
        select(cron)
        .where(cron.c.name.in_(list(names)))
        .order_by(cron.c.name)
        .with_for_update(skip_locked=True)
        .cte("locked")
    )
    stmt = select(locked, jobs.c.state.label("last_job_state")).outerjoin(
        jobs, jobs.c.id == locked.c.last_job_id
    )
    return list(conn.execute(stmt))


# reset_cron: a new or changed schedule starts over at next_tick. Index: pk_workerpool_cron.
def reset_cron(
    conn: Connection, name: str, *, queue: str, expression: str, timezone: str, next_tick: datetime
) -> None:
    """A new or changed schedule: its first tick is ``next_tick``."""
    stmt = (
        update(cron)
        .where(cron.c.name == name)
        .values(
            queue=queue,
            expression=expression,
            timezone=timezone,
            next_tick=next_tick,
            updated_at=func.now(),
        )
    )
    conn.execute(stmt)


# advance_cron: record a handled tick (its job, or one more skip). Index: pk_workerpool_cron.
def advance_cron(
    conn: Connection,
    name: str,
    *,
    queue: str,
    tick: datetime,
    next_tick: datetime,
    job_id: int | None = None,
    skipped: bool = False,
) -> None:
    """Tick ``tick`` is handled: it became job ``job_id``, or was skipped (counted if
    ``skipped``)."""
    values: dict[str, Any] = {
        "queue": queue,
        "last_tick": tick,
        "next_tick": next_tick,
        "updated_at": func.now(),
    }
    if job_id is not None:
        values["last_job_id"] = job_id
    if skipped:
        values["skipped"] = cron.c.skipped + 1
    conn.execute(update(cron).where(cron.c.name == name).values(**values))


# ---------------------------------------------------------------------------------------------
# pruning


def prune_finished(
    conn: Connection, older_than: float, limit: int, kept: Mapping[str, float] | None = None
) -> int:
    """Delete up to ``limit`` done/cancelled rows finished more than ``older_than`` seconds ago
    (per pass: ``limit`` of the default rows, and up to ``limit`` of each task in ``kept``,
    whose rows are kept for the seconds it gives instead: ``@pool.task(result_ttl=)``).

    Dead rows are never pruned: they stay until an operator purges them.
    """
    kept = dict(kept or {})
    deleted = conn.execute(prune_finished_statement(older_than, limit, sorted(kept))).rowcount
    for task, ttl in sorted(kept.items()):
        deleted += conn.execute(prune_finished_statement(ttl, limit, task=task)).rowcount
    return deleted


# prune_finished: delete a bounded batch of old done/cancelled rows (of one task, or of every
# task but some). Index: ix_workerpool_jobs_finished (the batch), then pk_workerpool_jobs.
def prune_finished_statement(
    older_than: float, limit: int, other_than: Sequence[str] = (), *, task: str | None = None
):
    only = [jobs.c.task == task] if task is not None else []
    if other_than:
        only.append(jobs.c.task.not_in(list(other_than)))
    doomed = (
        select(jobs.c.id)
        .where(
            state_in(*PRUNED_STATES),
            jobs.c.finished_at < func.now() - bindparam("older", seconds(older_than)),
            *only,
        )
        .order_by(jobs.c.finished_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    # = ANY(ARRAY(...)): probes the primary key; a join to the CTE may hash the whole table
    ids = func.array(select(doomed.c.id).scalar_subquery())
    return jobs.delete().where(jobs.c.id == func.any(ids))
