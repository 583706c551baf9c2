"""A job is born: the INSERT of one job or of a batch's rows, and the wake-up NOTIFY.

Each statement is a SQLAlchemy Core expression built once at import and compiled once per
dialect to the driver's own SQL (``%(name)s`` parameters), then sent with
``exec_driver_sql``: SQLAlchemy would otherwise walk the expression to find its cache key on
every enqueue. The same statements serve a caller's transaction, a connection of the pool's
own, and the asyncio driver (through ``run_sync``).

Two choices make the variants, each because it is cheaper to leave out what a write does not
need:

- ``ON CONFLICT`` only for a batch with a key (speculative insertion costs ~10 % of a batch's
  statement); one job always has it (a single row pays nothing measurable).
- the NOTIFY rides in the statement (one round trip) when the pool notifies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

import psycopg
from sqlalchemy import (
    Connection,
    Float,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    or_,
    select,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP, insert

from ..model.errors import IdempotencyConflict
from ..model.new_job import NewJob
from . import doors, unique_keys
from .compiled import driver_sql
from .schema import KEY_HELD, jobs

#: The channel that wakes listening workers (see ``claim.LISTEN``).
NOTIFY_CHANNEL = "workerpool_jobs"

#: Every column an enqueue writes, in the order its statements (and COPY's lines) list them.
COLUMNS = (
    "queue",
    "task",
    "payload",
    "payload_version",
    "priority",
    "max_attempts",
    "key",
    "run_at",
    "trace_context",
    "batch_id",
    "concurrency_key",
    "key_scope",
    "tags",
)


def _param(name: str) -> Any:
    """A parameter every execution supplies (None by default, so the statement compiles)."""
    return bindparam(name, value=None)


def _seconds(value: Any) -> Any:
    return value * literal_column("interval '1 second'")


def _run_at(run_at: Any, delay: Any) -> Any:
    """``run_at``, else now plus ``delay`` seconds, else now."""
    return func.coalesce(run_at, func.now() + _seconds(func.coalesce(delay, literal_column("0"))))


#: The arbiter of a key conflict: the unique index of held keys (``schema.KEY_HELD``).
_ON_KEY: dict[str, Any] = {"index_elements": [jobs.c.key], "index_where": text(KEY_HELD)}


def _with_notify(inserted: Any, returned: Sequence[str]) -> Any:
    """``inserted`` (an INSERT ... RETURNING) and the wake-up NOTIFY in one statement, sent
    when the transaction commits and only if a row was inserted: the NOTIFY is a materialized
    CTE joined to the inserted rows, so the planner evaluates it only when there is one."""
    rows = inserted.cte("inserted")
    notified = (
        select(func.pg_notify(_param("channel"), _param("queues")).label("sent"))
        .cte("notified")
        .prefix_with("MATERIALIZED")
    )
    return select(*(rows.c[name] for name in returned)).select_from(rows.join(notified, true()))


# ---------------------------------------------------------------------------------------------
# a batch


#: The rows of a batch, one JSON document (far cheaper to send and parse than one array per
#: column), read in input order: ``ROWS FROM`` is the form of ``WITH ORDINALITY`` that takes a
#: column definition list. A field absent from a row reads as NULL.
_BATCH_ROWS = text("""ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (
         queue text, task text, payload jsonb, payload_version int, priority smallint,
         max_attempts int, key text, run_at timestamptz, delay float8,
         concurrency_key text, key_scope text, tags text[])) WITH ORDINALITY
       AS t(queue, task, payload, payload_version, priority, max_attempts, key, run_at,
            delay, concurrency_key, key_scope, tags, ord)""").bindparams(_param("rows"))


def _row(name: str) -> Any:
    return literal_column(f"t.{name}")


def _batch_statement(*, keyed: bool, notify: bool) -> Any:
    """One INSERT for a whole batch; ids in input order; with a key, taken keys are skipped.

    Ids are drawn from the sequence in input order: the identity default is evaluated in the
    projection above the ordinality scan, which the planner reads in ``ord`` order (it needs no
    sort), so the returned ids sorted ascending line up with the input rows whatever order
    RETURNING uses. A keyed batch returns each inserted row's key so skipped rows can be told
    apart. Index: uq_workerpool_jobs_key (ON CONFLICT, keyed batches only).
    """
    source = (
        select(
            *map(_row, COLUMNS[:7]),
            _run_at(_row("run_at"), _row("delay")),
            cast(_param("trace_context"), JSONB),
            cast(_param("batch_id"), jobs.c.batch_id.type),
            _row("concurrency_key"),
            _row("key_scope"),
            _row("tags"),
        )
        .select_from(_BATCH_ROWS)
        .order_by(_row("ord"))
    )
    statement = insert(jobs).from_select(list(COLUMNS), source)
    returned = ("id", "key") if keyed else ("id",)
    if keyed:
        statement = statement.on_conflict_do_nothing(**_ON_KEY)
    statement = statement.returning(*(jobs.c[name] for name in returned))
    return _with_notify(statement, returned) if notify else statement


_BATCH_STATEMENTS = {
    (keyed, notify): _batch_statement(keyed=keyed, notify=notify)
    for keyed in (False, True)
    for notify in (False, True)
}


def insert_jobs(
    conn: Connection,
    rows: Sequence[NewJob],
    *,
    notify: bool = False,
    trace_context: str | None = None,
    batch_id: int | None = None,
) -> list[int]:
    """Insert ``rows`` in one statement; a row whose key exists returns the existing id.

    With ``notify=True`` the same statement also sends the wake-up NOTIFY for the rows' queues
    (see :func:`notify`). Raises IdempotencyConflict (nothing written by this call once the
    caller's transaction rolls back) when an existing key holds a different task or payload.
    ``batch_id``: the new rows are members of this batch (a held key's job stays as it is).
    """
    return insert_job_chunks(
        conn, [rows], notify=notify, trace_context=trace_context, batch_id=batch_id
    )


def insert_job_chunks(
    conn: Connection,
    chunks: Iterable[Sequence[NewJob]],
    *,
    notify: bool = False,
    trace_context: str | None = None,
    batch_id: int | None = None,
) -> list[int]:
    """:func:`insert_jobs` for each chunk: on psycopg 3, all sent in one pipeline.

    The server inserts one chunk while the caller checks and builds the next (``chunks`` may be
    a generator that validates as it goes), and the statements share one network flight. Run it
    inside a transaction or savepoint: a chunk that fails to build raises after earlier chunks
    reached the server, and only the rollback takes them back.
    """
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):  # psycopg2, or the asyncio driver
        return [
            job_id
            for rows in chunks
            if rows
            for job_id in _ids(
                conn,
                rows,
                conn.exec_driver_sql(
                    *_batch_sql(conn, rows, notify, trace_context, batch_id)
                ).all(),
            )
        ]
    sent: list[tuple[Sequence[NewJob], Any]] = []
    with driver.pipeline():
        for rows in chunks:
            if rows:
                cursor = driver.cursor()
                cursor.execute(*_batch_sql(conn, rows, notify, trace_context, batch_id))
                sent.append((rows, cursor))
    return [job_id for rows, cursor in sent for job_id in _ids(conn, rows, cursor.fetchall())]


def _batch_sql(
    conn: Connection,
    rows: Sequence[NewJob],
    notify: bool,
    trace_context: str | None,
    batch_id: int | None,
) -> tuple[str, dict[str, Any]]:
    sql, defaults = driver_sql(conn.dialect, _BATCH_STATEMENTS[_keyed(rows), notify])
    params = dict(
        defaults, rows=_rows_document(rows), trace_context=trace_context, batch_id=batch_id
    )
    if notify:
        params.update(channel=NOTIFY_CHANNEL, queues=_queue_names(row.queue for row in rows))
    return sql, params


def _ids(conn: Connection, rows: Sequence[NewJob], returned: Sequence[Any]) -> list[int]:
    return _ids_in_input_order(conn, rows, returned, keyed=_keyed(rows))


def _keyed(rows: Sequence[NewJob]) -> bool:
    return any(row.key is not None for row in rows)


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


_EXTENDED_ROW_JSON = _ROW_JSON[:-1] + ',"concurrency_key":%s,"key_scope":%s,"tags":%s}'


def _row_json(row: NewJob) -> str:
    if row.concurrency_key is not None or row.key_scope is not None or row.tags is not None:
        return _EXTENDED_ROW_JSON % (
            *_row_json_values(row),
            _json_text(row.concurrency_key),
            _json_text(row.key_scope),
            "null" if row.tags is None else json.dumps(row.tags, ensure_ascii=False),
        )
    if row.key is None and row.run_at is None and row.delay is None:
        return _PLAIN_ROW_JSON % (
            _json_name(row.queue),
            _json_name(row.task),
            row.payload_json,
            row.payload_version,
            row.priority,
            row.max_attempts,
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
        existing = unique_keys.holders(conn, missing)
        for index, row in enumerate(rows):
            if new_ids[index] is None:
                new_ids[index] = unique_keys.settle(row, existing.get(row.key))
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


def _one_statement(*, replace: bool, notify: bool, bound: str | None) -> Any:
    """The one-job INSERT, unless its key is held; with ``replace``, a pending holder takes the
    new job's payload, run_at and priority (debounce), while a holder that started, or whose
    period is over, is left alone (the caller then sees it). Index: uq_workerpool_jobs_key.

    ``bound``: only if that function (``workerpool_queue_room`` or ``_take``, migration 0023)
    finds room under ``max_pending``, in the same statement (one round trip, one commit); the
    room it found is the statement's second column."""
    values = {name: _param(name) for name in COLUMNS}
    values.update(
        payload=cast(values["payload"], JSONB),
        run_at=_run_at(
            cast(values["run_at"], TIMESTAMP(timezone=True)), cast(_param("delay"), Float)
        ),
        trace_context=cast(values["trace_context"], JSONB),
        batch_id=cast(values["batch_id"], jobs.c.batch_id.type),
        tags=cast(values["tags"], jobs.c.tags.type),
        key_expires_at=func.now() + _seconds(cast(_param("unique_for"), Float)),
    )
    if bound is not None:
        check = getattr(func, bound)(_param("queue"), 1, _param("max_pending"))
        room = select(check.label("left")).cte("room")
        rows = select(*values.values()).select_from(room).where(room.c.left >= 0)
        statement = insert(jobs).from_select(list(values), rows)
    else:
        statement = insert(jobs).values(values)
    if replace:
        new = statement.excluded
        statement = statement.on_conflict_do_update(
            **_ON_KEY,
            set_={
                name: new[name]
                for name in ("payload", "payload_version", "run_at", "priority", "concurrency_key")
            },
            where=and_(
                jobs.c.state == literal_column("'pending'"),
                jobs.c.task == new.task,
                # IS DISTINCT FROM: a key held forever has a NULL scope, and NOT (NULL ...)
                # is not true
                or_(
                    jobs.c.key_scope.is_distinct_from(literal_column("'for'")),
                    jobs.c.key_expires_at > func.now(),
                ),
            ),
        )
    else:
        statement = statement.on_conflict_do_nothing(**_ON_KEY)
    statement = statement.returning(jobs.c.id)
    if not notify and bound is None:
        return statement
    inserted = statement.cte("inserted")
    columns = [select(inserted.c.id).scalar_subquery()]
    if bound is not None:
        columns.append(select(room.c.left).scalar_subquery())
    if notify:
        columns.append(func.pg_notify(_param("channel"), _param("queue")))
    return select(*columns)


#: The room check of a bounded queue's enqueue: counting, or taking from the queue's credit
#: (only a statement that is its own transaction may take: see migration 0023).
COUNT_ROOM = "workerpool_queue_room"
TAKE_ROOM = "workerpool_queue_take"

_ONE_STATEMENTS = {
    (replace, notify, bound): _one_statement(replace=replace, notify=notify, bound=bound)
    for replace in (False, True)
    for notify in (False, True)
    for bound in (None, COUNT_ROOM, TAKE_ROOM)
}


def insert_one(
    conn: Connection,
    row: NewJob,
    *,
    notify_queue: bool,
    trace_context: str | None = None,
    batch_id: int | None = None,
    max_pending: int | None = None,
    own_transaction: bool = False,
) -> int:
    """Insert one job (and NOTIFY) in a single round trip; a key already held returns its
    holder's id (or raises, or replaces a pending holder: ``row.on_conflict``). With
    ``max_pending`` (a bounded queue), QueueFull and nothing inserted if the job does not fit;
    ``own_transaction``: ``conn`` is in autocommit, so the room may come from the queue's credit.

    A key held for a period that is over is released (``unique_keys.release_expired``) and the
    insert tried once more: whoever inserts first wins on the unique index, the other sees its job.
    """
    bounded = max_pending is not None
    bound = None if not bounded else TAKE_ROOM if own_transaction else COUNT_ROOM
    sql, defaults = driver_sql(
        conn.dialect, _ONE_STATEMENTS[row.on_conflict == "replace", notify_queue, bound]
    )
    params = dict(defaults, **_one_params(row), trace_context=trace_context, batch_id=batch_id)
    if bounded:
        params["max_pending"] = max_pending
    for _ in range(2):
        found = _first_row(conn, sql, params)
        inserted = None if found is None else found[0]
        if inserted is not None:
            return inserted
        if bounded and found is not None and found[1] < 0:
            raise doors.queue_full(row.queue, 1, max_pending, found[1])
        holder = unique_keys.holder(conn, row.key)
        if holder is not None and not holder.expired:
            return unique_keys.settle(row, holder)
        if holder is not None:
            unique_keys.release_expired(conn, row.key)
    raise IdempotencyConflict(f"key {row.key!r} changed hands during this enqueue; retry")


def _first_row(conn: Connection, sql: str, params: dict[str, Any]) -> Any:
    """The first row the statement returns, sent on psycopg's connection under ``conn``:
    SQLAlchemy's execution context (result, events) doubles a single enqueue's client CPU
    (~300 µs against ~130 µs a job; ``python -m bench --only single`` shows the client CPU).
    Another driver (psycopg2, or asyncio through ``run_sync``) goes through SQLAlchemy."""
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        return conn.exec_driver_sql(sql, params).first()
    if not driver.autocommit and not conn.in_transaction():
        conn.begin()  # what SQLAlchemy's own execute does first: the caller's commit() commits
    return driver.execute(sql, params).fetchone()


def _one_params(row: NewJob) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "task": row.task,
        "payload": row.payload_json,
        "payload_version": row.payload_version,
        "priority": row.priority,
        "max_attempts": row.max_attempts,
        "key": row.key,
        "run_at": row.run_at,
        "delay": row.delay,
        "channel": NOTIFY_CHANNEL,
        "concurrency_key": row.concurrency_key,
        "key_scope": row.key_scope,
        "unique_for": row.unique_for,
        "tags": None if row.tags is None else list(row.tags),
    }


# ---------------------------------------------------------------------------------------------
# the wake-up


# notify: wake listening workers for these queues when the transaction commits. Index: none.
def notify(conn: Connection, queues: Iterable[str]) -> None:
    """Wake listening workers when the transaction commits. A hint only: workers also poll."""
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, _queue_names(queues))))


def _queue_names(queues: Iterable[str]) -> str:
    return ",".join(sorted(set(queues)))
