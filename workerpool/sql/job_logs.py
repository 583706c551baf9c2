"""Attempt logs: the records a handler logged, one row per attempt, written in the transaction
of the attempt's outcome and only for outcomes that transaction wrote (a fenced-out attempt
leaves none); read back for the job's page and ``workerpool status --job``.

Index: ix_workerpool_job_logs_job_id (a job's rows, oldest first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, cast, insert, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Text

from .schema import job_logs

_INSERT = insert(job_logs).values(
    job_id=bindparam("job_id"), attempt=bindparam("attempt"),
    records=cast(bindparam("records", type_=Text), JSONB), dropped=bindparam("dropped"))


def insert_logs(conn: Connection, rows: Sequence[tuple[int, int, str, int]]) -> None:
    """``(job_id, attempt, records as JSON text, dropped)`` rows, in one executemany."""
    if rows:
        conn.execute(_INSERT, [{"job_id": job_id, "attempt": attempt, "records": records,
                                "dropped": dropped} for job_id, attempt, records, dropped in rows])


# job_logs_of: a job's attempt logs, oldest first, at most ``limit`` attempts (the newest).
def job_logs_of(conn: Connection, job_id: int, limit: int = 50) -> list[Any]:
    newest = (select(job_logs.c.id, job_logs.c.attempt, job_logs.c.records, job_logs.c.dropped,
                     job_logs.c.written_at)
              .where(job_logs.c.job_id == job_id).order_by(job_logs.c.id.desc()).limit(limit)
              .subquery())
    return list(conn.execute(select(newest).order_by(newest.c.id)))
