"""A cron schedule's run-time state, as operators change it: pause, resume, a run now.

The scheduler's own statements (ensure, lock, reset, advance) are in :mod:`.maintenance`; the
code declares a schedule's defaults (expression, queue) and a run-time change sits beside them
in the same row, which a restart never resets (``ensure_crons`` inserts only missing rows).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from .schema import cron


# cron_names: the schedules with a row (every one a scheduler has seen). Index:
# pk_workerpool_cron.
def cron_names(conn: Connection) -> set[str]:
    return set(conn.execute(select(cron.c.name)).scalars())


# set_cron_paused: pause or resume one schedule. Index: pk_workerpool_cron.
def set_cron_paused(conn: Connection, name: str, paused: bool, by: str) -> bool:
    """Returns whether the row exists. The row lock waits for a scheduler pass holding it."""
    values: dict[str, Any] = {
        "paused": paused,
        "changed_at": func.now(),
        "changed_by": by,
        "paused_at": func.now() if paused else None,
        "paused_by": by if paused else None,
    }
    stmt = update(cron).where(cron.c.name == name).values(**values)
    return conn.execute(stmt).rowcount == 1


# set_last_job: a run started by hand is the schedule's last job (overlap checks see it).
# Index: pk_workerpool_cron.
def set_last_job(conn: Connection, name: str, job_id: int) -> None:
    conn.execute(update(cron).where(cron.c.name == name).values(last_job_id=job_id))
