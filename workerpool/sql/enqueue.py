"""A job is born: inserting rows (one, a batch, or pipelined chunks) and the wake-up NOTIFY."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, func, select, text

from ..model.errors import IdempotencyConflict
from ..model.new_job import NewJob
from . import keys
from .schema import KEY_HELD, jobs

#: The channel that wakes listening workers (see ``claim.LISTEN``).
NOTIFY_CHANNEL = "workerpool_jobs"


# ---------------------------------------------------------------------------------------------
# the trace context: one value per statement (every job of one enqueue call shares its caller's
# span), JSON text from workerpool.tracing or NULL when the enqueue is not traced


TRACE_COLUMN = "trace_context"
TRACE_PARAM = "trace_context"
TRACE_VALUE = f"CAST(:{TRACE_PARAM} AS jsonb)"

# The batch: one value per statement too (a batch's members are written by its own calls); a
# job outside a batch is written by statements that do not name the column at all.
BATCH_COLUMN = ", batch_id"
BATCH_VALUE = ", CAST(:batch_id AS bigint)"


# ---------------------------------------------------------------------------------------------
# a batch


# insert_jobs: insert a batch from one JSON document, ids in input order; keyed batches skip the
# keys already taken. Index: uq_workerpool_jobs_key (ON CONFLICT, keyed batches only).
#: One statement per batch (DESIGN §5). The rows travel as one JSON document (far cheaper to send
#: and parse than one array per column). Ids are drawn from the sequence in input order: the
#: identity default is evaluated in the projection above the ``WITH ORDINALITY`` scan, which the
#: planner reads in ``ord`` order (it needs no sort), so the returned ids sorted ascending line up
#: with the inserted input rows whatever order RETURNING uses. A batch without keys cannot
#: conflict and skips ``ON CONFLICT`` (speculative insertion costs ~10 % of the statement); a
#: batch with keys returns each inserted row's key so skipped rows can be told apart. The NOTIFY,
#: when asked for, rides in the same statement (delivered on commit; only if a row was inserted).
_INSERT_SQL = """
WITH inserted AS (
  INSERT INTO {table} (queue, task, payload, payload_version, priority, max_attempts, key,
                       run_at, {trace_column}{batch_column}{extra})
  SELECT queue, task, payload, payload_version, priority, max_attempts, key,
         COALESCE(run_at, now() + make_interval(secs => COALESCE(delay, 0))),
         {trace_value}{batch_value}{extra}
  FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (
         queue text, task text, payload jsonb, payload_version int, priority smallint,
         max_attempts int, key text, run_at timestamptz, delay float8{extra_types}))
       WITH ORDINALITY
       AS t(queue, task, payload, payload_version, priority, max_attempts, key, run_at,
            delay{extra}, ord)
  ORDER BY ord{on_conflict}
  RETURNING id{returning}
){notified}
SELECT inserted.id{returning} FROM inserted{join_notified}
"""
#: The columns a batch row with limit options adds (a plain batch does not carry them).
_EXTRA_COLUMNS = ", concurrency_key, key_scope"


def _insert_statement(*, keyed: bool, notify: bool, extended: bool = False,
                      batched: bool = False) -> Any:
    return text(_INSERT_SQL.format(
        table=jobs.name,
        trace_column=TRACE_COLUMN,
        trace_value=TRACE_VALUE,
        batch_column=BATCH_COLUMN if batched else "",
        batch_value=BATCH_VALUE if batched else "",
        extra=_EXTRA_COLUMNS if extended else "",
        extra_types=", concurrency_key text, key_scope text" if extended else "",
        on_conflict=f"\n  ON CONFLICT (key) WHERE {KEY_HELD} DO NOTHING" if keyed else "",
        returning=", key" if keyed else "",
        notified=", notified AS MATERIALIZED (SELECT pg_notify(:channel, :queues) AS sent)"
        if notify else "",
        join_notified=" CROSS JOIN notified" if notify else "",
    ))


_INSERT_STATEMENTS = {
    (keyed, notify, extended, batched): _insert_statement(
        keyed=keyed, notify=notify, extended=extended, batched=batched)
    for keyed in (False, True) for notify in (False, True) for extended in (False, True)
    for batched in (False, True)
}


def insert_jobs(conn: Connection, rows: Sequence[NewJob], *, notify: bool = False,
                trace_context: str | None = None, batch_id: int | None = None) -> list[int]:
    """Insert ``rows`` in one statement; a row whose key exists returns the existing id.

    With ``notify=True`` the same statement also sends the wake-up NOTIFY for the rows' queues
    (see :func:`notify`). Raises IdempotencyConflict (nothing written by this call once the
    caller's transaction rolls back) when an existing key holds a different task or payload.
    ``batch_id``: the new rows are members of this batch (a held key's job stays as it is).
    """
    if not rows:
        return []
    keyed, extended = _keyed(rows), _extended(rows)
    returned = conn.execute(
        _INSERT_STATEMENTS[keyed, notify, extended, batch_id is not None],
        _insert_params(rows, notify, trace_context, batch_id)).all()
    return _ids_in_input_order(conn, rows, returned, keyed=keyed)


def insert_job_chunks(
    conn: Connection, chunks: Iterable[Sequence[NewJob]], *, notify: bool = False,
    trace_context: str | None = None, batch_id: int | None = None,
) -> list[int]:
    """:func:`insert_jobs` for each chunk, all sent in one pipeline (psycopg's pipeline mode).

    The server inserts one chunk while the caller checks and builds the next (``chunks`` may be
    a generator that validates as it goes), and the statements share one network flight. Run it
    inside a transaction or savepoint: a chunk that fails to build raises after earlier chunks
    reached the server, and only the rollback takes them back.
    """
    driver = conn.connection.driver_connection
    sent: list[tuple[Sequence[NewJob], bool, Any]] = []
    with driver.pipeline():
        for rows in chunks:
            keyed = _keyed(rows)
            cursor = driver.cursor()
            cursor.execute(_driver_sql(conn.dialect, keyed, notify, _extended(rows),
                                       batch_id is not None),
                           _insert_params(rows, notify, trace_context, batch_id))
            sent.append((rows, keyed, cursor))
    ids: list[int] = []
    for rows, keyed, cursor in sent:
        ids += _ids_in_input_order(conn, rows, cursor.fetchall(), keyed=keyed)
    return ids


def can_pipeline(conn: Connection) -> bool:
    """Whether ``conn`` runs on psycopg 3, whose pipeline :func:`insert_job_chunks` needs (a
    caller's connection may come from an engine on another driver)."""
    return hasattr(conn.connection.driver_connection, "pipeline")


def _keyed(rows: Sequence[NewJob]) -> bool:
    return any(row.key is not None for row in rows)


def _extended(rows: Sequence[NewJob]) -> bool:
    """Whether a row carries a concurrency key or a key scope (the columns of limits)."""
    return any(row.concurrency_key is not None or row.key_scope is not None for row in rows)


def _insert_params(rows: Sequence[NewJob], notify: bool, trace_context: str | None,
                   batch_id: int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"rows": _rows_document(rows), TRACE_PARAM: trace_context}
    if batch_id is not None:
        params["batch_id"] = batch_id
    if notify:
        params.update(channel=NOTIFY_CHANNEL, queues=_queue_names(row.queue for row in rows))
    return params


@functools.lru_cache(maxsize=32)
def _driver_sql(dialect: Any, keyed: bool, notify: bool, extended: bool,
                batched: bool = False) -> str:
    """The insert as the driver's own SQL text (``%(name)s`` parameters), compiled once."""
    return str(_INSERT_STATEMENTS[keyed, notify, extended, batched].compile(dialect=dialect))


def _rows_document(rows: Sequence[NewJob]) -> str:
    """The batch as one JSON array; each payload is already-validated JSON text, spliced in."""
    return "[" + ",".join(map(_row_json, rows)) + "]"


_ROW_JSON = (
    '{"queue":%s,"task":%s,"payload":%s,"payload_version":%d,"priority":%d,"max_attempts":%d,'
    '"key":%s,"run_at":%s,"delay":%s}'
)
#: The common row: absent fields read as NULL in ``json_to_recordset``, and a shorter document
#: is cheaper to build, send and parse.
_PLAIN_ROW_JSON = (
    '{"queue":%s,"task":%s,"payload":%s,"payload_version":%d,"priority":%d,"max_attempts":%d}'
)


_EXTENDED_ROW_JSON = _ROW_JSON[:-1] + ',"concurrency_key":%s,"key_scope":%s}'


def _row_json(row: NewJob) -> str:
    if row.concurrency_key is not None or row.key_scope is not None:
        return _EXTENDED_ROW_JSON % (
            *_row_json_values(row), _json_text(row.concurrency_key), _json_text(row.key_scope))
    if row.key is None and row.run_at is None and row.delay is None:
        return _PLAIN_ROW_JSON % (
            _json_name(row.queue), _json_name(row.task), row.payload_json,
            row.payload_version, row.priority, row.max_attempts,
        )
    return _ROW_JSON % _row_json_values(row)


def _row_json_values(row: NewJob) -> tuple:
    return (
        _json_name(row.queue),
        _json_name(row.task),
        row.payload_json,
        row.payload_version,
        row.priority,
        row.max_attempts,
        _json_text(row.key),
        "null" if row.run_at is None else json.dumps(row.run_at.isoformat()),
        "null" if row.delay is None else json.dumps(row.delay),
    )


def _json_text(value: str | None) -> str:
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


@functools.lru_cache(maxsize=1024)
def _json_name(name: str) -> str:
    """Queue and task names as JSON strings (few distinct values: computed once each)."""
    return json.dumps(name)


def _ids_in_input_order(
    conn: Connection, rows: Sequence[NewJob], returned: Sequence[Any], *, keyed: bool
) -> list[int]:
    """Each row's job id from what the insert returned: ``(id,)`` rows, or ``(id, key)``."""
    if not keyed:
        ids = sorted(row[0] for row in returned)  # ascending id = input order
        if len(ids) != len(rows):
            raise RuntimeError(f"inserted {len(ids)} of {len(rows)} rows without keys")
        return ids
    ids_keys = sorted(returned, key=itemgetter(0))  # ascending id = input order
    new_ids = _line_up(rows, ids_keys)
    missing = {row.key for row, got in zip(rows, new_ids, strict=True) if got is None}
    if missing:
        existing = keys.holders(conn, missing)
        for index, row in enumerate(rows):
            if new_ids[index] is None:
                new_ids[index] = keys.settle(row, existing.get(row.key))
    return new_ids  # type: ignore[return-value]


def _line_up(rows: Sequence[NewJob], returned: Sequence[Any]) -> list[int | None]:
    """Each input row's new id, walking the inserted ``(id, key)`` pairs in id order; None for a
    row whose key was already taken by an earlier job (looked up afterwards)."""
    result: list[int | None] = []
    in_batch: dict[str, int] = {}
    pairs = iter(returned)
    pending = next(pairs, None)
    for row in rows:
        if row.key is not None and row.key in in_batch:
            result.append(in_batch[row.key])  # the same job twice in one batch
        elif pending is not None and pending[1] == row.key:
            result.append(pending[0])
            if row.key is not None:
                in_batch[row.key] = pending[0]
            pending = next(pairs, None)
        elif row.key is None:
            raise RuntimeError("inserted rows came back out of input order")
        else:
            result.append(None)
    if pending is not None:
        raise RuntimeError("inserted rows came back out of input order")
    return result


# ---------------------------------------------------------------------------------------------
# one job


def insert_one(conn: Connection, row: NewJob, *, notify_queue: bool,
               trace_context: str | None = None, batch_id: int | None = None) -> int:
    """Insert one job (and NOTIFY) in a single round trip; a key already held returns its
    holder's id (or raises, or replaces a pending holder: ``row.on_conflict``).

    A key held for a period that is over is released (``keys.release_expired``) and the insert
    tried once more: whoever inserts first wins on the unique index, the other sees its job.
    """
    statement = _INSERT_ONE_STATEMENTS[_one_shape(row, batch_id is not None), notify_queue]
    params = _one_params(row, trace_context)
    if batch_id is not None:
        params["batch_id"] = batch_id
    for _ in range(2):
        inserted = conn.execute(statement, params).scalar()
        if inserted is not None:
            return inserted
        holder = keys.holder(conn, row.key)
        if holder is not None and not holder.expired:
            return keys.settle(row, holder)
        if holder is not None:
            keys.release_expired(conn, row.key)
    raise IdempotencyConflict(f"key {row.key!r} changed hands during this enqueue; retry")


def _one_shape(row: NewJob, batched: bool = False) -> tuple[bool, bool, bool]:
    """(extended, replace, batched): whether the row has limit columns, replaces a pending
    holder, and is a batch's member."""
    return (row.concurrency_key is not None or row.key_scope is not None,
            row.on_conflict == "replace", batched)


def _one_params(row: NewJob, trace_context: str | None) -> dict[str, Any]:
    params = {TRACE_PARAM: trace_context,
        "queue": row.queue, "task": row.task, "payload": row.payload_json,
        "payload_version": row.payload_version, "priority": row.priority,
        "max_attempts": row.max_attempts, "key": row.key, "run_at": row.run_at,
        "delay": row.delay, "channel": NOTIFY_CHANNEL,
    }
    if row.concurrency_key is not None or row.key_scope is not None:
        params.update(concurrency_key=row.concurrency_key, key_scope=row.key_scope,
                      unique_for=row.unique_for)
    return params


#: A pending holder of the key takes the new job's payload, run_at and priority (debounce); a
#: holder that started, or whose period is over, is left alone (the caller then sees it).
_REPLACE = (
    " DO UPDATE SET payload = EXCLUDED.payload, payload_version = EXCLUDED.payload_version,"
    " run_at = EXCLUDED.run_at, priority = EXCLUDED.priority,"
    " concurrency_key = EXCLUDED.concurrency_key"
    f" WHERE {jobs.name}.state = 'pending' AND {jobs.name}.task = EXCLUDED.task"
    # IS DISTINCT FROM: a key held forever has a NULL scope, and NOT (NULL ...) is not true
    f" AND ({jobs.name}.key_scope IS DISTINCT FROM 'for' OR {jobs.name}.key_expires_at > now())"
)


def _insert_one_sql(*, extended: bool, replace: bool, batched: bool = False) -> str:
    """The one-job INSERT: plain (the common job), or with the columns of limits, or a
    batch's member."""
    columns = ("queue, task, payload, payload_version, priority, max_attempts, key, run_at,"
               f" {TRACE_COLUMN}{BATCH_COLUMN if batched else ''}")
    values = (":queue, :task, CAST(:payload AS jsonb), :payload_version, :priority,"
              " :max_attempts, :key, COALESCE(CAST(:run_at AS timestamptz),"
              " now() + make_interval(secs => COALESCE(CAST(:delay AS float8), 0))),"
              f" {TRACE_VALUE}{BATCH_VALUE if batched else ''}")
    if extended:
        columns += ", concurrency_key, key_scope, key_expires_at"
        values += (", :concurrency_key, :key_scope,"
                   " now() + make_interval(secs => CAST(:unique_for AS float8))")
    return (f"INSERT INTO {jobs.name} ({columns}) VALUES ({values})"
            f" ON CONFLICT (key) WHERE {KEY_HELD}{_REPLACE if replace else ' DO NOTHING'}"
            " RETURNING id")


def _insert_one_statement(*, extended: bool, replace: bool, notify: bool,
                          batched: bool = False) -> Any:
    """The insert, alone or with its queue's NOTIFY in the same round trip."""
    sql = _insert_one_sql(extended=extended, replace=replace, batched=batched)
    if notify:
        sql = (f"WITH inserted AS ({sql}) "
               "SELECT (SELECT id FROM inserted), pg_notify(:channel, :queue)")
    return text(sql)


# insert_one: insert one job unless its key is held (or replace a pending holder's payload).
# Index: uq_workerpool_jobs_key (ON CONFLICT).
_INSERT_ONE_STATEMENTS = {
    ((extended, replace, batched), notify): _insert_one_statement(
        extended=extended, replace=replace, notify=notify, batched=batched)
    for extended in (False, True) for replace in (False, True) for notify in (False, True)
    for batched in (False, True)
}


def one_statement(dialect: Any, row: NewJob, *, notify_queue: bool,
                  trace_context: str | None = None) -> tuple[str, dict[str, Any]]:
    """A job without a key as one statement in the driver's own SQL, and its parameters, for
    a caller that sends it on the DBAPI connection itself (``workerpool.single_write``); the
    statement returns the new id first. A keyed job needs :func:`insert_one` (a held key is
    read after the insert)."""
    if row.key is not None:
        raise ValueError("one_statement takes a job without a key")
    return _one_driver_sql(dialect, _one_shape(row), notify_queue), _one_params(row, trace_context)


@functools.lru_cache(maxsize=16)
def _one_driver_sql(dialect: Any, shape: tuple[bool, bool, bool], notify: bool) -> str:
    return str(_INSERT_ONE_STATEMENTS[shape, notify].compile(dialect=dialect))


# ---------------------------------------------------------------------------------------------
# the wake-up


# notify: wake listening workers for these queues when the transaction commits. Index: none.
def notify(conn: Connection, queues: Iterable[str]) -> None:
    """Wake listening workers when the transaction commits. A hint only: workers also poll."""
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, _queue_names(queues))))


def _queue_names(queues: Iterable[str]) -> str:
    return ",".join(sorted(set(queues)))
