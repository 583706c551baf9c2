"""What ``workerpool cron list`` and the dashboard's /cron page show: each schedule's code
defaults (from the app, when given) beside its run-time state (from ``workerpool_cron``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import sql
from ..client import WorkerPool


@dataclass(frozen=True)
class CronView:
    name: str
    expression: str  # what the schedulers run now (the row's, else the code's)
    queue: str
    timezone: str
    declared: str | None  # the expression declared in this app's code (None: not given it)
    next_tick: datetime | None
    last_tick: datetime | None
    last_job_id: int | None
    last_job_state: str | None
    skipped: int
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    changed_by: str | None
    changed_at: datetime | None
    #: A schedule added at run time (``pool.cron_add``): the task it enqueues (None: declared).
    task: str | None = None
    added_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            k: v.isoformat() if isinstance(v, datetime) else v for k, v in self.__dict__.items()
        }


def list_crons(pool: WorkerPool) -> list[CronView]:
    """Every schedule a scheduler has seen, and those the pool declares but none has yet."""
    with pool.engine.connect() as conn:
        rows = {row.name: row for row in sql.list_crons(conn)}
    names = sorted(set(rows) | set(pool.crons))
    return [_view(name, rows.get(name), pool) for name in names]


def _view(name: str, row: Any, pool: WorkerPool) -> CronView:
    spec = pool.crons.get(name)
    declared = spec.expression if spec is not None else None
    if row is None:
        assert spec is not None
        return CronView(
            name,
            spec.expression,
            spec.queue,
            spec.timezone,
            declared,
            None,
            None,
            None,
            None,
            0,
            False,
            None,
            None,
            None,
            None,
        )
    return CronView(
        name,
        row.expression,
        row.queue,
        row.timezone,
        declared,
        row.next_tick,
        row.last_tick,
        row.last_job_id,
        row.last_job_state,
        row.skipped,
        row.paused,
        row.paused_by,
        row.paused_at,
        row.changed_by,
        row.changed_at,
        row.task,
        row.added_by,
    )
