"""Attempt logs: the records a handler logged, one row per attempt, written in the transaction
of the attempt's outcome and only for outcomes that transaction wrote (a fenced-out attempt
leaves none); read back for the job's page and ``workerpool status --job``.

Index: ix_workerpool_job_logs_job_id (a job's rows, oldest first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, insert, literal_column, select, text

from ..model.states import JobState
from .clock import seconds
from .schema import job_logs, jobs

#: Every attempt of an outcome batch in one statement: the rows as one JSON document (the
#: records already JSON text, spliced in), read by ``jsonb_to_recordset``.
_ROWS = text("""jsonb_to_recordset(CAST(:rows AS jsonb))
    AS t(job_id bigint, attempt int, records jsonb, dropped int)""")
_COLUMNS = ("job_id", "attempt", "records", "dropped")
_INSERT = insert(job_logs).from_select(
    list(_COLUMNS), select(*(literal_column(f"t.{name}") for name in _COLUMNS)).select_from(_ROWS)
)


def insert_logs(conn: Connection, rows: Sequence[tuple[int, int, str, int]]) -> None:
    """``(job_id, attempt, records as JSON text, dropped)`` rows, in one INSERT."""
    if rows:
        document = ",".join(
            f'{{"job_id":{int(job_id)},"attempt":{int(attempt)},"records":{records},'
            f'"dropped":{int(dropped)}}}'
            for job_id, attempt, records, dropped in rows
        )
        conn.execute(_INSERT, {"rows": f"[{document}]"})


# job_logs_of: a job's attempt logs, oldest first, at most ``limit`` attempts (the newest).
def job_logs_of(conn: Connection, job_id: int, limit: int = 50) -> list[Any]:
    newest = (
        select(
            job_logs.c.id,
            job_logs.c.attempt,
            job_logs.c.records,
            job_logs.c.dropped,
            job_logs.c.written_at,
        )
        .where(job_logs.c.job_id == job_id)
        .order_by(job_logs.c.id.desc())
        .limit(limit)
        .subquery()
    )
    return list(conn.execute(select(newest).order_by(newest.c.id)))


# delete_logs: the logs of these jobs (a purge). Index: ix_workerpool_job_logs_job_id.
def delete_logs(conn: Connection, job_ids: Sequence[int]) -> int:
    return conn.execute(
        job_logs.delete().where(job_logs.c.job_id == func.any(list(job_ids)))
    ).rowcount


# prune_logs: a bounded batch of logs older than the retention, but a dead job's (kept while the
# job is). Indexes: ix_workerpool_job_logs_written, then pk_workerpool_jobs per row.
def prune_logs(conn: Connection, older_than: float, limit: int) -> int:
    dead = exists().where(jobs.c.id == job_logs.c.job_id, jobs.c.state == JobState.DEAD)
    old = (
        select(job_logs.c.id)
        .where(job_logs.c.written_at < func.now() - bindparam("older", seconds(older_than)), ~dead)
        .order_by(job_logs.c.written_at)
        .limit(limit)
        .scalar_subquery()
    )
    return conn.execute(job_logs.delete().where(job_logs.c.id.in_(old))).rowcount
