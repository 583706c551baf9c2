"""Attempt logs: the records a handler logged, one row per attempt, written in the transaction
of the attempt's outcome and only for outcomes that transaction wrote (a fenced-out attempt
leaves none); read back for the job's page and ``workerpool status --job``.

Index: ix_workerpool_job_logs_job_id (a job's rows, oldest first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, insert, literal_column, select, text

from .schema import job_logs

#: Every attempt of an outcome batch in one statement: the rows as one JSON document (the
#: records already JSON text, spliced in), read by ``jsonb_to_recordset``.
_ROWS = text("""jsonb_to_recordset(CAST(:rows AS jsonb))
    AS t(job_id bigint, attempt int, records jsonb, dropped int)""")
_COLUMNS = ("job_id", "attempt", "records", "dropped")
_INSERT = insert(job_logs).from_select(
    list(_COLUMNS), select(*(literal_column(f"t.{name}") for name in _COLUMNS)).select_from(_ROWS))


def insert_logs(conn: Connection, rows: Sequence[tuple[int, int, str, int]]) -> None:
    """``(job_id, attempt, records as JSON text, dropped)`` rows, in one INSERT."""
    if rows:
        document = ",".join(
            f'{{"job_id":{int(job_id)},"attempt":{int(attempt)},"records":{records},'
            f'"dropped":{int(dropped)}}}' for job_id, attempt, records, dropped in rows)
        conn.execute(_INSERT, {"rows": f"[{document}]"})


# job_logs_of: a job's attempt logs, oldest first, at most ``limit`` attempts (the newest).
def job_logs_of(conn: Connection, job_id: int, limit: int = 50) -> list[Any]:
    newest = (select(job_logs.c.id, job_logs.c.attempt, job_logs.c.records, job_logs.c.dropped,
                     job_logs.c.written_at)
              .where(job_logs.c.job_id == job_id).order_by(job_logs.c.id.desc()).limit(limit)
              .subquery())
    return list(conn.execute(select(newest).order_by(newest.c.id)))
