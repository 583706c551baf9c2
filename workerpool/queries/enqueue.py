"""A job is born: inserting rows (one, a batch, or pipelined chunks) and the wake-up NOTIFY."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, func, select, text

from ..errors import IdempotencyConflict
from ..schema import jobs

#: The channel that wakes listening workers (see ``claim.LISTEN``).
NOTIFY_CHANNEL = "workerpool_jobs"


class NewJob(NamedTuple):
    """A validated row to insert (built by WorkerPool, never by users).

    A NamedTuple, not a frozen dataclass: one is built per enqueued job, and a frozen
    dataclass's ``__init__`` is several times slower.
    """

    queue: str
    task: str
    payload_json: str
    payload_version: int
    priority: int
    max_attempts: int
    key: str | None
    run_at: datetime | None
    delay: float | None


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
  INSERT INTO {table} (queue, task, payload, payload_version, priority, max_attempts, key, run_at)
  SELECT queue, task, payload, payload_version, priority, max_attempts, key,
         COALESCE(run_at, now() + make_interval(secs => COALESCE(delay, 0)))
  FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (
         queue text, task text, payload jsonb, payload_version int, priority smallint,
         max_attempts int, key text, run_at timestamptz, delay float8))
       WITH ORDINALITY
       AS t(queue, task, payload, payload_version, priority, max_attempts, key, run_at, delay, ord)
  ORDER BY ord{on_conflict}
  RETURNING id{returning}
){notified}
SELECT inserted.id{returning} FROM inserted{join_notified}
"""


def _insert_statement(*, keyed: bool, notify: bool) -> Any:
    return text(_INSERT_SQL.format(
        table=jobs.name,
        on_conflict="\n  ON CONFLICT (key) DO NOTHING" if keyed else "",
        returning=", key" if keyed else "",
        notified=", notified AS MATERIALIZED (SELECT pg_notify(:channel, :queues) AS sent)"
        if notify else "",
        join_notified=" CROSS JOIN notified" if notify else "",
    ))


_INSERT_STATEMENTS = {
    (keyed, notify): _insert_statement(keyed=keyed, notify=notify)
    for keyed in (False, True) for notify in (False, True)
}


def insert_jobs(conn: Connection, rows: Sequence[NewJob], *, notify: bool = False) -> list[int]:
    """Insert ``rows`` in one statement; a row whose key exists returns the existing id.

    With ``notify=True`` the same statement also sends the wake-up NOTIFY for the rows' queues
    (see :func:`notify`). Raises IdempotencyConflict (nothing written by this call once the
    caller's transaction rolls back) when an existing key holds a different task or payload.
    """
    if not rows:
        return []
    keyed = _keyed(rows)
    returned = conn.execute(_INSERT_STATEMENTS[keyed, notify], _insert_params(rows, notify)).all()
    return _ids_in_input_order(conn, rows, returned, keyed=keyed)


def insert_job_chunks(
    conn: Connection, chunks: Iterable[Sequence[NewJob]], *, notify: bool = False
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
            cursor.execute(_driver_sql(conn.dialect, keyed, notify), _insert_params(rows, notify))
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


def _insert_params(rows: Sequence[NewJob], notify: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"rows": _rows_document(rows)}
    if notify:
        params.update(channel=NOTIFY_CHANNEL, queues=_queue_names(row.queue for row in rows))
    return params


@functools.lru_cache(maxsize=8)
def _driver_sql(dialect: Any, keyed: bool, notify: bool) -> str:
    """The insert as the driver's own SQL text (``%(name)s`` parameters), compiled once."""
    return str(_INSERT_STATEMENTS[keyed, notify].compile(dialect=dialect))


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


def _row_json(row: NewJob) -> str:
    if row.key is None and row.run_at is None and row.delay is None:
        return _PLAIN_ROW_JSON % (
            _json_name(row.queue), _json_name(row.task), row.payload_json,
            row.payload_version, row.priority, row.max_attempts,
        )
    return _ROW_JSON % (
        _json_name(row.queue),
        _json_name(row.task),
        row.payload_json,
        row.payload_version,
        row.priority,
        row.max_attempts,
        "null" if row.key is None else json.dumps(row.key, ensure_ascii=False),
        "null" if row.run_at is None else json.dumps(row.run_at.isoformat()),
        "null" if row.delay is None else json.dumps(row.delay),
    )


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
        existing = _existing_by_key(conn, missing)
        for index, row in enumerate(rows):
            if new_ids[index] is None:
                new_ids[index] = _match_existing(row, existing.get(row.key))
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


def insert_one(conn: Connection, row: NewJob, *, notify_queue: bool) -> int:
    """Insert one job (and NOTIFY) in one statement; an existing key returns its job's id.

    The statement also reads the job already holding the key, so a taken key costs no second
    round trip (unless that job committed after the statement's snapshot: then it is read here).
    """
    stmt = _INSERT_ONE_STATEMENTS[row.key is not None, notify_queue]
    returned = conn.execute(stmt, one_params(row)).one()
    return inserted_id(row, returned, lambda key: _existing_by_key(conn, {key}).get(key))


def one_statement(dialect: Any, row: NewJob, *, notify_queue: bool) -> tuple[str, dict[str, Any]]:
    """The statement of :func:`insert_one` as the driver's own SQL text and its parameters,
    for a caller that sends it on the DBAPI connection itself (``workerpool.single_write``)."""
    return _one_driver_sql(dialect, row.key is not None, notify_queue), one_params(row)


def one_params(row: NewJob) -> dict[str, Any]:
    return {
        "queue": row.queue, "task": row.task, "payload": row.payload_json,
        "payload_version": row.payload_version, "priority": row.priority,
        "max_attempts": row.max_attempts, "key": row.key, "run_at": row.run_at,
        "delay": row.delay, "channel": NOTIFY_CHANNEL,
    }


def inserted_id(row: NewJob, returned: Sequence[Any], lookup: Any) -> int:
    """The job id from what :func:`insert_one`'s statement returned: ``(id, holder id, holder
    task, holder payload)``; ``lookup(key)`` reads a holder the statement could not see."""
    new_id, holder_id, holder_task, holder_payload = returned[:4]
    if new_id is not None:
        return new_id
    if holder_id is not None:
        return _match_existing(row, Holder(holder_id, holder_task, holder_payload))
    return _match_existing(row, lookup(row.key))


class Holder(NamedTuple):
    """The job holding a key: what a new job with that key must match to be the same job."""

    id: int
    task: str
    payload: Any


# insert_one: insert one job unless its key is taken. Index: uq_workerpool_jobs_key (ON CONFLICT).
_INSERT_ONE_SQL = (
    f"INSERT INTO {jobs.name} (queue, task, payload, payload_version, priority, max_attempts, key,"
    " run_at) VALUES (:queue, :task, CAST(:payload AS jsonb), :payload_version, :priority,"
    " :max_attempts, :key, COALESCE(CAST(:run_at AS timestamptz),"
    " now() + make_interval(secs => COALESCE(CAST(:delay AS float8), 0))))"
    " ON CONFLICT (key) DO NOTHING RETURNING id"
)
#: A job without a key cannot conflict: no speculative insertion (as for keyless batches).
_INSERT_ONE_KEYLESS_SQL = _INSERT_ONE_SQL.replace(" ON CONFLICT (key) DO NOTHING", "")


# insert_one, the statement sent: the insert, the holder of a taken key (read in the same
# statement, from its snapshot) and, when asked, the queue's NOTIFY (delivered on commit).
# Index: uq_workerpool_jobs_key (ON CONFLICT and the holder's lookup).
def _insert_one_statement(*, keyed: bool, notify: bool) -> Any:
    insert = _INSERT_ONE_SQL if keyed else _INSERT_ONE_KEYLESS_SQL
    notified = ", pg_notify(:channel, :queue)" if notify else ""
    if not keyed:
        return text(f"WITH inserted AS ({insert}) SELECT (SELECT id FROM inserted), NULL, NULL,"
                    f" NULL{notified}")
    return text(
        f"WITH inserted AS ({insert}) "
        f"SELECT i.id, holder.id, holder.task, holder.payload{notified} "
        "FROM (SELECT (SELECT id FROM inserted) AS id) AS i "
        f"LEFT JOIN {jobs.name} AS holder ON i.id IS NULL AND holder.key = CAST(:key AS text)"
    )


_INSERT_ONE_STATEMENTS = {
    (keyed, notify): _insert_one_statement(keyed=keyed, notify=notify)
    for keyed in (False, True) for notify in (False, True)
}


@functools.lru_cache(maxsize=8)
def _one_driver_sql(dialect: Any, keyed: bool, notify: bool) -> str:
    return str(_INSERT_ONE_STATEMENTS[keyed, notify].compile(dialect=dialect))


# holder_sql: the job holding one key (parameter ``key``). Index: uq_workerpool_jobs_key.
@functools.lru_cache(maxsize=4)
def holder_sql(dialect: Any) -> str:
    """The job holding a key, as driver SQL: for a holder :func:`insert_one` could not see.
    Returns :class:`Holder`'s columns."""
    stmt = select(jobs.c.id, jobs.c.task, jobs.c.payload).where(
        jobs.c.key == bindparam("key"))
    return str(stmt.compile(dialect=dialect))


# ---------------------------------------------------------------------------------------------
# keys already taken


# existing_by_key: the jobs holding the keys an insert skipped. Index: uq_workerpool_jobs_key.
def _existing_by_key(conn: Connection, keys: set[str]) -> dict[str, Any]:
    stmt = select(jobs.c.key, jobs.c.id, jobs.c.task, jobs.c.payload).where(
        jobs.c.key.in_(sorted(keys))
    )
    return {row.key: row for row in conn.execute(stmt)}


def _match_existing(row: NewJob, existing: Any) -> int:
    if existing is None:  # the holder of the key vanished between insert and read (pruned)
        raise IdempotencyConflict(f"key {row.key!r} is held by a job that just disappeared; retry")
    if existing.task != row.task or existing.payload != json.loads(row.payload_json):
        raise IdempotencyConflict(
            f"key {row.key!r} already belongs to job {existing.id} ({existing.task}) "
            "with a different payload"
        )
    return existing.id


# ---------------------------------------------------------------------------------------------
# the wake-up


# notify: wake listening workers for these queues when the transaction commits. Index: none.
def notify(conn: Connection, queues: Iterable[str]) -> None:
    """Wake listening workers when the transaction commits. A hint only: workers also poll."""
    conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, _queue_names(queues))))


def _queue_names(queues: Iterable[str]) -> str:
    return ",".join(sorted(set(queues)))
