"""A cron schedule's run-time state, as operators change it: pause, resume, a run now.

The scheduler's own statements (ensure, lock, reset, advance) are in :mod:`.maintenance`; the
code declares a schedule's defaults (expression, queue) and a run-time change sits beside them
in the same row, which a restart never resets (``ensure_crons`` inserts only missing rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select, update

from .schema import cron, jobs


# cron_rows: every schedule row with its last job's state. Index: pk_workerpool_cron, then
# pk_workerpool_jobs (the last job).
def cron_rows(conn: Connection, names: Sequence[str] | None = None) -> list[Any]:
    stmt = (select(cron, jobs.c.state.label("last_job_state"))
            .outerjoin(jobs, jobs.c.id == cron.c.last_job_id).order_by(cron.c.name))
    if names is not None:
        stmt = stmt.where(cron.c.name.in_(list(names)))
    return list(conn.execute(stmt))


# set_cron_paused: pause or resume one schedule. Index: pk_workerpool_cron.
def set_cron_paused(conn: Connection, name: str, paused: bool, by: str) -> bool:
    """Returns whether the row exists. The row lock waits for a scheduler pass holding it."""
    values: dict[str, Any] = {"paused": paused, "changed_at": func.now(), "changed_by": by,
                              "paused_at": func.now() if paused else None,
                              "paused_by": by if paused else None}
    stmt = update(cron).where(cron.c.name == name).values(**values)
    return conn.execute(stmt).rowcount == 1


# set_last_job: a run started by hand is the schedule's last job (overlap checks see it).
# Index: pk_workerpool_cron.
def set_last_job(conn: Connection, name: str, job_id: int) -> None:
    conn.execute(update(cron).where(cron.c.name == name).values(last_job_id=job_id))
