"""A batch without keys by COPY: ids reserved in one round trip, the rows streamed, one NOTIFY.

A multi-row INSERT makes the server parse the batch as one statement; ``COPY ... FROM STDIN``
streams rows it inserts as they arrive, the fastest way in. COPY returns nothing and cannot
skip a taken key, so it takes only batches without keys (``insert_jobs`` keeps those with), and
the ids come first: one ``nextval`` per row, drawn in one statement, sorted ascending and given to
the rows in input order (ids ascend with input order, as they do for ``insert_jobs``).

Everything runs in one transaction: ids and the clock, then the COPY, then the NOTIFY, which
PostgreSQL delivers on commit. The caller checks every row first; should a row still fail to
encode while the COPY streams, psycopg ends it (CopyFail), and the rollback keeps nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.copy import LibpqWriter
from sqlalchemy import Connection

from .enqueue import COLUMNS, NOTIFY_CHANNEL, NewJob
from .schema import jobs

#: COPY takes jobs without a key (nor its scope), and a batch's id as a last column of its own.
NOT_COPIED = ("key", "key_scope", "batch_id")
#: The enqueue's own columns (:data:`~workerpool.sql.enqueue.COLUMNS`), after a reserved id.
COPY_COLUMNS = ("id", *(name for name in COLUMNS if name not in NOT_COPIED))
COPY_SQL = f"COPY {jobs.name} ({', '.join(COPY_COLUMNS)}) FROM STDIN"
#: A batch's members: the same rows and the batch's id (one value for every row).
COPY_BATCH_SQL = f"COPY {jobs.name} ({', '.join(COPY_COLUMNS)}, batch_id) FROM STDIN"
#: The sequence is looked up once per statement (an InitPlan): a lookup per row (the subquery
#: in FROM is flattened into the scan) made the statement 5x slower.
_RESERVE_SQL = (
    "SELECT now(), ARRAY(SELECT nextval("
    f"(SELECT pg_get_serial_sequence('{jobs.name}', 'id')::regclass))"
    " FROM generate_series(1, {count}))"
)
#: ``timestamptz`` input ``now`` is the transaction's start, the column default ``now()``.
_NOW = "now"
_NULL = "\\N"
#: What COPY's text format reads as syntax in a value; queue and task names cannot hold any of
#: it (``validation.NAME_PATTERN``).
_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_LINE = "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n"
if _LINE.count("%") != len(COPY_COLUMNS):  # a column added to COLUMNS needs its field here
    raise ImportError(f"a COPY line has {_LINE.count('%')} fields for {COPY_COLUMNS}")
#: Rows per COPY message. The server starts on the first rows while the rest are built, which
#: psycopg's own buffer would delay (it sends 32 KiB at a time: most of a 1000-row batch); much
#: smaller messages cost more writes than they overlap.
LINES_PER_WRITE = 128


def can_copy(conn: Connection) -> bool:
    """Whether ``conn`` is on psycopg 3's sync driver, whose ``cursor.copy`` this needs (a
    caller's connection may be psycopg2, or an async one reached through ``run_sync``)."""
    return isinstance(conn.connection.driver_connection, psycopg.Connection)


def copy_jobs(
    driver: psycopg.Connection,
    rows: Iterable[NewJob],
    count: int,
    *,
    notify: bool = False,
    trace_context: str | None = None,
    own_transaction: bool = False,
    batch_id: int | None = None,
) -> list[int]:
    """COPY ``count`` rows (no keys), streamed from ``rows``; their ids in input order.

    ``own_transaction``: ``driver`` is in autocommit and this sends BEGIN and COMMIT (each with
    the neighbouring statement, no round trip of their own) and ROLLBACK on any failure.
    Otherwise it runs in the transaction or savepoint open on ``driver``, which the caller rolls
    back when this raises.
    """
    if count == 0:
        return []
    begin = "BEGIN; " if own_transaction else ""
    with driver.cursor() as cursor:
        try:
            now, ids = _reserve(cursor, begin, count)
            queues = _copy(cursor, rows, ids, now, trace_context, batch_id)
            _finish(cursor, queues if notify else None, commit=own_transaction)
        except BaseException:
            if own_transaction:
                _rollback(driver)
            raise
    return ids


def _reserve(cursor: psycopg.Cursor, begin: str, count: int) -> tuple[datetime, list[int]]:
    """The transaction's clock and ``count`` new ids, ascending, in one round trip."""
    cursor.execute(begin + _RESERVE_SQL.format(count=int(count)))
    if begin:
        cursor.nextset()  # past BEGIN's empty result
    now, ids = cursor.fetchone()  # type: ignore[misc]
    ids.sort()
    return now, ids


def _copy(
    cursor: psycopg.Cursor,
    rows: Iterable[NewJob],
    ids: list[int],
    now: datetime,
    trace_context: str | None,
    batch_id: int | None = None,
) -> set[str]:
    """Stream the rows, each with its id, :data:`LINES_PER_WRITE` at a time; their queues."""
    queues: set[str] = set()
    trace = _NULL if trace_context is None else _escape_json(trace_context)
    lines: list[str] = []
    sql = COPY_SQL if batch_id is None else COPY_BATCH_SQL
    member = "" if batch_id is None else f"\t{int(batch_id)}\n"
    with cursor.copy(sql, writer=LibpqWriter(cursor, flush_threshold=0)) as copy:
        for job_id, row in zip(ids, rows, strict=True):
            line = _line(job_id, row, now, trace)
            lines.append(line[:-1] + member if member else line)
            queues.add(row.queue)
            if len(lines) == LINES_PER_WRITE:
                copy.write("".join(lines))
                lines.clear()
        if lines:
            copy.write("".join(lines))
    return queues


def _line(job_id: int, row: NewJob, now: datetime, trace: str) -> str:
    """One row in COPY's text format (the columns of :data:`COPY_COLUMNS`)."""
    if row.key is not None:
        raise ValueError("copy_jobs takes jobs without a key")
    concurrency_key = (
        _NULL if row.concurrency_key is None else row.concurrency_key.translate(_TEXT_ESCAPES)
    )
    return _LINE % (
        job_id,
        row.queue,
        row.task,
        _escape_json(row.payload_json),
        row.payload_version,
        row.priority,
        row.max_attempts,
        _run_at(row, now),
        trace,
        concurrency_key,
        _tags(row.tags),
    )


def _tags(tags: tuple[str, ...] | None) -> str:
    """A ``text[]`` in COPY's text format: an array literal of quoted elements, escaped for
    the array parser (backslash, quote), then for COPY (backslash, tab, newline)."""
    if tags is None:
        return _NULL
    quoted = ('"' + tag.replace("\\", "\\\\").replace('"', '\\"') + '"' for tag in tags)
    return ("{" + ",".join(quoted) + "}").translate(_TEXT_ESCAPES)


def _escape_json(text: str) -> str:
    """JSON text from ``workerpool.model.payload`` or ``json.dumps`` holds no raw tab, newline or
    carriage return (JSON escapes them inside strings); only its backslashes need doubling."""
    return text.replace("\\", "\\\\")


def _run_at(row: NewJob, now: datetime) -> str:
    """``COALESCE(run_at, now() + delay)`` of ``insert_jobs``, with ``now`` the transaction's."""
    if row.run_at is not None:
        return row.run_at.isoformat()
    if row.delay:
        return (now + timedelta(seconds=row.delay)).isoformat()
    return _NOW


def _finish(cursor: psycopg.Cursor, queues: set[str] | None, *, commit: bool) -> None:
    """The NOTIFY (delivered on commit) and the COMMIT, in one round trip."""
    parts = []
    if queues:
        parts.append(
            sql.SQL("SELECT pg_notify({}, {})").format(
                sql.Literal(NOTIFY_CHANNEL), sql.Literal(",".join(sorted(queues)))
            )
        )
    if commit:
        parts.append(sql.SQL("COMMIT"))
    if parts:
        cursor.execute(sql.SQL("; ").join(parts))


def _rollback(driver: psycopg.Connection) -> None:
    """Leave the connection idle for the pool; a broken one raises nothing more here (the
    error already on its way out says why, and the pool discards it)."""
    if driver.closed or driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        driver.execute("ROLLBACK")
    except psycopg.Error:
        pass


__all__ = ["COPY_SQL", "can_copy", "copy_jobs"]
