"""Enqueue: checking jobs and writing them, one at a time, in a batch, or in pipelined chunks.

Everything here is checked before anything is kept, and a write is as few statements as it can
be: one job is one INSERT in autocommit (or in the caller's transaction); a batch without keys is
one COPY (``sql.bulk``), its rows checked as they stream; a batch with keys is one multi-row
INSERT, or chunks of :data:`INSERT_CHUNK` pipelined in one transaction when it is large.

The asyncio driver (:func:`enqueue_one_async`, :func:`enqueue_batch_async`) builds the same
rows with the same checks and runs the same statements through ``AsyncConnection.run_sync``:
there is one set of rules, and two ways to reach the database.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine

from .. import sql
from ..model import tracing
from ..model.errors import IdempotencyConflict, InvalidJob
from ..model.limits import job_concurrency_key, key_scope
from ..model.payload import check_key, dumps
from ..model.specs import TaskSpec
from ..model.validation import check_delay, check_max_attempts, check_priority, check_run_at
from . import single_write

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

#: Jobs per statement in :func:`enqueue_batch`: 250 measured fastest of 100-500 with
#: ``python -m bench --only enqueue``. The server is the slower side (~1.5 ms to insert 250 rows,
#: ~0.6 ms of Python to check and build them), so Python's work hides behind it.
INSERT_CHUNK = 250
#: The first chunk is smaller: nothing overlaps the Python work on it, so a small one gets the
#: server started sooner (faster on 1000-job batches with the same command).
FIRST_CHUNK = 50


class Registry(Protocol):
    """What enqueueing needs of a pool: its tasks, its limits and its engine."""

    payload_limit: int
    notify: bool

    @property
    def engine(self) -> Engine: ...

    @property
    def async_engine(self) -> AsyncEngine: ...

    def task_spec(self, task: str | Callable) -> TaskSpec: ...


def build_job(
    pool: Registry,
    task: str | Callable,
    payload: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
    unique: str | None = None,
    unique_for: float | timedelta | None = None,
    on_conflict: str | None = None,
) -> sql.NewJob:
    """Validate one job. Raises a named error for any bad input; touches no database."""
    spec = pool.task_spec(task)
    payload = {} if payload is None else payload
    scope = _NO_SCOPE if key is None and unique is None and unique_for is None and (
        on_conflict is None) else key_scope(key, unique, unique_for, on_conflict)
    return sql.NewJob(  # positional, and option checks only when given: this is per row
        spec.queue,
        spec.name,
        dumps(payload, limit=pool.payload_limit),
        spec.version,
        spec.priority if priority is None else check_priority(priority),
        spec.max_attempts if max_attempts is None
        else check_max_attempts(max_attempts, InvalidJob),
        None if key is None else check_key(key),
        None if run_at is None else check_run_at(run_at),
        None if delay is None else check_delay(delay, run_at),
        None if concurrency_key is None and spec.concurrency_limit is None and (
            spec.key_rate_limit is None) else job_concurrency_key(spec, payload, concurrency_key),
        *scope,
    )


#: key_scope, unique_for and on_conflict of a job without key options.
_NO_SCOPE = (None, None, "keep")


def enqueue_one(pool: Registry, task: str | Callable, payload: Mapping[str, Any] | None,
                conn: Connection | None, options: Mapping[str, Any]) -> int:
    """One job in one INSERT: in the caller's transaction on ``conn``, else in autocommit."""
    row = build_job(pool, task, payload, **options)
    if conn is not None:
        conn = caller_connection(conn)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        if conn is not None:
            return sql.insert_one(conn, row, notify_queue=pool.notify, trace_context=trace)
        if row.key is None:  # nothing to conflict with: one statement, no pre-ping
            return _insert_keyless(pool.engine, row, pool.notify, trace)
        with single_statement(pool.engine) as own:  # a taken key writes nothing: no rollback
            return sql.insert_one(own, row, notify_queue=pool.notify, trace_context=trace)


def _insert_keyless(engine: Engine, row: sql.NewJob, notify: bool, trace: str | None) -> int:
    statement, params = sql.one_statement(engine.dialect, row, notify_queue=notify,
                                          trace_context=trace)
    return single_write.write(engine,
                              lambda cursor: cursor.execute(statement, params).fetchone()[0])


def build_batch(pool: Registry, jobs: Any) -> list[sql.NewJob]:
    """Validate a whole ``enqueue_many`` batch (items, options, keys within it); no database."""
    return _build_rows(pool, _job_items(jobs), {})


def enqueue_batch(pool: Registry, jobs: Any, conn: Connection | None) -> list[int]:
    """Many jobs atomically, with one NOTIFY; ids in the order given (``pool.enqueue_many``).

    A batch without keys is one COPY (:func:`_copy_batch`). A batch with a key needs ``ON
    CONFLICT``: one INSERT, or, beyond :data:`INSERT_CHUNK` jobs, chunks pipelined in one
    transaction (a savepoint in the caller's). A caller's connection on another driver than
    psycopg 3 (psycopg2) can do neither COPY nor pipeline: its batch is one INSERT.
    """
    items = _job_items(jobs)
    if conn is not None:
        conn = caller_connection(conn)
    if items and not _any_key(items) and (conn is None or sql.can_copy(conn)):
        with tracing.enqueue_span(None, None, len(items)) as trace:
            return _copy_batch(pool, items, conn, trace)
    if len(items) > INSERT_CHUNK and (conn is None or sql.can_pipeline(conn)):
        with tracing.enqueue_span(None, None, len(items)) as trace:
            return _write_chunks(pool, items, conn, trace)
    rows = _build_rows(pool, items, {})
    with tracing.enqueue_span(None, None, len(rows)) as trace:
        if conn is not None:
            return sql.insert_jobs(conn, rows, notify=pool.notify, trace_context=trace)
        if all(row.key is None for row in rows):  # no key, no conflict: nothing to roll back
            with single_statement(pool.engine) as own:
                return sql.insert_jobs(own, rows, notify=pool.notify, trace_context=trace)
        with pool.engine.begin() as own:  # a taken key may raise after new rows are in
            return sql.insert_jobs(own, rows, notify=pool.notify, trace_context=trace)


def _copy_batch(pool: Registry, items: list[Any], conn: Connection | None,
                trace: str | None) -> list[int]:
    """A batch without keys by COPY: in a transaction of its own, or a savepoint in the
    caller's. Every row is checked before anything is sent: a bad one is refused with nothing
    written (checking them as they stream measured no faster)."""
    rows = [_build_item(pool, item) for item in items]

    def copy(driver: Any, own_transaction: bool) -> list[int]:
        return sql.copy_jobs(driver, rows, len(rows), notify=pool.notify,
                                 trace_context=trace, own_transaction=own_transaction)

    if conn is None:
        return single_write.write(pool.engine, lambda cursor: copy(cursor.connection, True))
    with atomically(conn):
        return copy(conn.connection.driver_connection, False)


def _any_key(items: list[Any]) -> bool:
    """Whether an item asks for a key (a keyed batch needs ``ON CONFLICT``: an INSERT)."""
    return any(len(item) == 3 and isinstance(item[2], Mapping) and item[2].get("key") is not None
               for item in items if isinstance(item, tuple | list))


def _write_chunks(pool: Registry, items: list[Any], conn: Connection | None,
                  trace: str | None) -> list[int]:
    seen: dict[str, sql.NewJob] = {}
    chunks = (_build_rows(pool, items[start:end], seen)
              for start, end in _chunk_bounds(len(items)))
    if conn is None:
        with single_statement(pool.engine) as own, atomically(own):
            return sql.insert_job_chunks(own, chunks, notify=pool.notify, trace_context=trace)
    with atomically(conn):
        return sql.insert_job_chunks(conn, chunks, notify=pool.notify, trace_context=trace)


def _build_rows(pool: Registry, items: list[Any], seen: dict[str, sql.NewJob]
                ) -> list[sql.NewJob]:
    return _check_batch_keys([_build_item(pool, item) for item in items], seen)


def _build_item(pool: Registry, item: Any) -> sql.NewJob:
    if isinstance(item, tuple | list) and len(item) == 2:
        return build_job(pool, item[0], item[1])
    if isinstance(item, tuple | list) and len(item) == 3 and isinstance(item[2], Mapping):
        return build_job(pool, item[0], item[1], **item[2])
    raise InvalidJob(
        f"each job is (task, payload) or (task, payload, options), got {item!r:.80}"
    )


def _chunk_bounds(total: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each chunk: FIRST_CHUNK jobs, then INSERT_CHUNK at a time."""
    start, end = 0, min(FIRST_CHUNK, total)
    while start < total:
        yield start, end
        start, end = end, min(end + INSERT_CHUNK, total)


def _job_items(jobs: Any) -> list[Any]:
    """The items of an ``enqueue_many`` batch (a string, a mapping or a non-iterable is not one)."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        raise InvalidJob(
            "enqueue_many takes an iterable of (task, payload) or (task, payload, options), "
            f"got {type(jobs).__name__}"
        )
    return list(jobs)


def _check_batch_keys(rows: list[sql.NewJob], seen: dict[str, sql.NewJob]
                      ) -> list[sql.NewJob]:
    """Two rows of one batch with the same key must be the same job, else IdempotencyConflict.
    ``seen`` carries the keys of the batch's earlier chunks."""
    for row in rows:
        if row.key is None:
            continue
        if row.key_scope == "for" or row.on_conflict != "keep":
            raise InvalidJob("enqueue_many takes keys held forever or unique='live';"
                             " unique_for and on_conflict='replace' or 'error' are for enqueue()")
        first = seen.setdefault(row.key, row)
        if (first.task, first.payload_json) != (row.task, row.payload_json):
            raise IdempotencyConflict(
                f"key {row.key!r} is used twice in one batch with different jobs"
            )
    return rows


# -- connections ----------------------------------------------------------------------------------


def caller_connection(conn: Any) -> Connection:
    """The ``conn=`` a caller passed, refused unless it is a SQLAlchemy Connection."""
    if not isinstance(conn, Connection):
        hint = "; use enqueue_async for an AsyncConnection" if _is_async(conn) else ""
        raise InvalidJob(
            "conn must be a SQLAlchemy Connection (from engine.begin() or engine.connect()), "
            f"got {type(conn).__name__}{hint}"
        )
    return conn


def caller_async_connection(conn: Any) -> AsyncConnection:
    """The ``conn=`` of an async enqueue, refused unless it is a SQLAlchemy AsyncConnection."""
    if not _is_async(conn):
        hint = "; use enqueue for a Connection" if isinstance(conn, Connection) else ""
        raise InvalidJob(
            "conn must be a SQLAlchemy AsyncConnection (from async_engine.begin() or "
            f".connect()), got {type(conn).__name__}{hint}"
        )
    return conn


def _is_async(conn: Any) -> bool:
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection
    except ImportError:  # pragma: no cover - part of SQLAlchemy; greenlet is what may be missing
        return False
    return isinstance(conn, AsyncConnection)


@contextmanager
def single_statement(engine: Engine) -> Iterator[Connection]:
    """A connection in autocommit, for a write that is one statement: the statement is its
    own transaction, which saves the BEGIN and COMMIT round trips."""
    with engine.connect() as own:
        yield own.execution_options(isolation_level="AUTOCOMMIT")


def atomically(conn: Connection) -> AbstractContextManager:
    """All or nothing for several statements on ``conn``: a savepoint in the caller's
    transaction, or a transaction of its own on a connection in autocommit."""
    driver = conn.connection.driver_connection
    if driver.autocommit:
        return driver.transaction()
    return conn.begin_nested()


# -- asyncio --------------------------------------------------------------------------------------


async def enqueue_one_async(pool: Registry, task: str | Callable,
                            payload: Mapping[str, Any] | None, conn: Any,
                            options: Mapping[str, Any]) -> int:
    """:func:`enqueue_one` on an ``AsyncConnection`` (the caller's transaction) or the pool's
    async engine; the row is built and checked before any connection is touched."""
    if conn is not None:
        conn = caller_async_connection(conn)
    row = build_job(pool, task, payload, **options)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        write = functools.partial(sql.insert_one, row=row, notify_queue=pool.notify,
                                  trace_context=trace)
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.begin() as own:
            return await own.run_sync(write)


async def enqueue_batch_async(pool: Registry, jobs: Any, conn: Any) -> list[int]:
    """:func:`enqueue_batch` on an ``AsyncConnection``: the whole batch is checked first, then
    written in one statement (psycopg's pipeline is a sync-connection feature)."""
    if conn is not None:
        conn = caller_async_connection(conn)
    rows = build_batch(pool, jobs)
    if not rows:
        return []
    with tracing.enqueue_span(None, None, len(rows)) as trace:
        write = functools.partial(sql.insert_jobs, rows=rows, notify=pool.notify,
                                  trace_context=trace)
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.begin() as own:  # a taken key may raise after rows are in
            return await own.run_sync(write)
