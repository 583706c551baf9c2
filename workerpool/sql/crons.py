"""A cron schedule's run-time state, as operators change it: pause, resume, a run now, and the
schedules added and removed at run time (a row whose ``task`` is set).

The scheduler's own statements (ensure, lock, reset, advance) are in :mod:`.maintenance`; the
code declares a schedule's defaults (expression, queue) and a run-time change sits beside them
in the same row, which a restart never resets (``ensure_crons`` inserts only missing rows).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, cast, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.types import Text

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


# cron_row: one schedule's row (None: no scheduler has seen it and nobody added it).
# Index: pk_workerpool_cron.
def cron_row(conn: Connection, name: str) -> Any | None:
    return conn.execute(select(cron).where(cron.c.name == name).with_for_update()).first()


# add_cron: a schedule added at run time, or an added one changed; next_tick NULL makes the next
# scheduler pass start it from now. Index: pk_workerpool_cron.
def add_cron(
    conn: Connection,
    name: str,
    *,
    queue: str,
    expression: str,
    timezone: str,
    task: str,
    payload_json: str,
    by: str,
) -> None:
    values: dict[str, Any] = {
        "queue": queue,
        "expression": expression,
        "timezone": timezone,
        "task": task,
        "payload": cast(literal(payload_json, Text), JSONB),
        "next_tick": None,
        "added_at": func.now(),
        "added_by": by,
        "changed_at": func.now(),
        "changed_by": by,
        "updated_at": func.now(),
    }
    stmt = insert(cron).values(name=name, **values)
    stmt = stmt.on_conflict_do_update(index_elements=[cron.c.name], set_=values)
    conn.execute(stmt)


# remove_cron: delete an added schedule. Index: pk_workerpool_cron.
def remove_cron(conn: Connection, name: str) -> bool:
    stmt = delete(cron).where(cron.c.name == name, cron.c.task.isnot(None))
    return conn.execute(stmt).rowcount == 1


# added_names: the schedules added at run time, which every scheduler pass reads beside the
# declared ones. Index: none (one row per schedule; a scan of a small table).
def added_names(conn: Connection) -> list[str]:
    return list(conn.execute(select(cron.c.name).where(cron.c.task.isnot(None))).scalars())
