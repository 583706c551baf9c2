"""Enqueue: writing checked jobs, one at a time, in a batch, or in pipelined chunks.

Every job is checked (:mod:`workerpool.model.new_job`) before anything is kept, and a write is
as few statements as it can be: one job is one INSERT in autocommit (or in the caller's
transaction); a batch without keys is one COPY (``sql.bulk``); a batch with keys is one
multi-row INSERT, or chunks of :data:`INSERT_CHUNK` pipelined in one transaction when it is
large.

The asyncio driver (:func:`enqueue_one_async`, :func:`enqueue_batch_async`) builds the same
rows with the same checks and runs the same statements through ``AsyncConnection.run_sync``:
there is one set of rules, and two ways to reach the database.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine

from .. import sql
from ..model import tracing
from ..model.errors import InvalidJob
from ..model.new_job import NewJob, build_batch, build_item, build_job, build_rows, job_items
from ..model.registry import Registry
from . import single_write

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

#: Jobs per statement in :func:`enqueue_batch`. Chunks are pipelined: the server inserts one
#: while Python checks and builds the next. At 250 the server is the slower side (about 1.5 ms
#: to insert them, 0.6 ms of Python to build them), so Python's work hides behind it; smaller
#: chunks pay more round trips, larger ones wait longer for the first (``python -m bench --only
#: enqueue`` compares them).
INSERT_CHUNK = 250
#: The first chunk is smaller: nothing overlaps the Python work on it, so a small one gets the
#: server started sooner.
FIRST_CHUNK = 50


class Target(Protocol):
    """Where enqueued jobs go: a pool's declarations and its engines (``WorkerPool``)."""

    registry: Registry

    @property
    def engine(self) -> Engine: ...

    @property
    def async_engine(self) -> AsyncEngine: ...


def enqueue_one(pool: Target, task: str | Callable, payload: Mapping[str, Any] | None,
                conn: Connection | None, options: Mapping[str, Any], *,
                batch_id: int | None = None) -> int:
    """One job in one INSERT: in the caller's transaction on ``conn``, else in autocommit.
    ``batch_id`` (with ``conn``): a member of that batch (``pool.batch``)."""
    row = build_job(pool.registry, task, payload, **options)
    if conn is not None:
        conn = caller_connection(conn)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        if conn is not None:
            return sql.insert_one(conn, row, notify_queue=pool.registry.notify,
                                  trace_context=trace, batch_id=batch_id)
        if row.key is None:  # nothing to conflict with: one statement, no pre-ping
            return _insert_keyless(pool.engine, row, pool.registry.notify, trace)
        with single_statement(pool.engine) as own:  # a taken key writes nothing: no rollback
            return sql.insert_one(own, row, notify_queue=pool.registry.notify, trace_context=trace)


def _insert_keyless(engine: Engine, row: NewJob, notify: bool, trace: str | None) -> int:
    statement, params = sql.one_statement(engine.dialect, row, notify_queue=notify,
                                          trace_context=trace)
    return single_write.write(engine,
                              lambda cursor: cursor.execute(statement, params).fetchone()[0])


def enqueue_batch(pool: Target, jobs: Any, conn: Connection | None, *,
                  batch_id: int | None = None) -> list[int]:
    """Many jobs atomically, with one NOTIFY; ids in the order given (``pool.enqueue_many``).

    A batch without keys is one COPY (:func:`_copy_batch`). A batch with a key needs ``ON
    CONFLICT``: one INSERT, or, beyond :data:`INSERT_CHUNK` jobs, chunks pipelined in one
    transaction (a savepoint in the caller's). A caller's connection on another driver than
    psycopg 3 (psycopg2) can do neither COPY nor pipeline: its batch is one INSERT.
    ``batch_id`` (with ``conn``): the new jobs are members of that batch.
    """
    items = job_items(jobs)
    if conn is not None:
        conn = caller_connection(conn)
    if items and not _any_key(items) and (conn is None or sql.can_copy(conn)):
        with tracing.enqueue_span(None, None, len(items)) as trace:
            return _copy_batch(pool, items, conn, trace, batch_id)
    if len(items) > INSERT_CHUNK and (conn is None or sql.can_pipeline(conn)):
        with tracing.enqueue_span(None, None, len(items)) as trace:
            return _write_chunks(pool, items, conn, trace, batch_id)
    rows = build_rows(pool.registry, items, {})
    with tracing.enqueue_span(None, None, len(rows)) as trace:
        if conn is not None:
            return sql.insert_jobs(conn, rows, notify=pool.registry.notify, trace_context=trace,
                                   batch_id=batch_id)
        if all(row.key is None for row in rows):  # no key, no conflict: nothing to roll back
            with single_statement(pool.engine) as own:
                return sql.insert_jobs(own, rows, notify=pool.registry.notify, trace_context=trace)
        with pool.engine.begin() as own:  # a taken key may raise after new rows are in
            return sql.insert_jobs(own, rows, notify=pool.registry.notify, trace_context=trace)


def _copy_batch(pool: Target, items: list[Any], conn: Connection | None,
                trace: str | None, batch_id: int | None = None) -> list[int]:
    """A batch without keys by COPY: in a transaction of its own, or a savepoint in the
    caller's. Every row is checked before anything is sent: a bad one is refused with nothing
    written (checking them as they stream gains nothing: Python is the faster side)."""
    rows = [build_item(pool.registry, item) for item in items]

    def copy(driver: Any, own_transaction: bool) -> list[int]:
        return sql.copy_jobs(driver, rows, len(rows), notify=pool.registry.notify,
                             trace_context=trace, own_transaction=own_transaction,
                             batch_id=batch_id)

    if conn is None:
        return single_write.write(pool.engine, lambda cursor: copy(cursor.connection, True))
    with atomically(conn):
        return copy(conn.connection.driver_connection, False)


def _any_key(items: list[Any]) -> bool:
    """Whether an item asks for a key (a keyed batch needs ``ON CONFLICT``: an INSERT)."""
    return any(len(item) == 3 and isinstance(item[2], Mapping) and item[2].get("key") is not None
               for item in items if isinstance(item, tuple | list))


def _write_chunks(pool: Target, items: list[Any], conn: Connection | None,
                  trace: str | None, batch_id: int | None = None) -> list[int]:
    seen: dict[str, NewJob] = {}
    notify = pool.registry.notify
    chunks = (build_rows(pool.registry, items[start:end], seen)
              for start, end in _chunk_bounds(len(items)))
    if conn is None:
        with single_statement(pool.engine) as own, atomically(own):
            return sql.insert_job_chunks(own, chunks, notify=notify, trace_context=trace)
    with atomically(conn):
        return sql.insert_job_chunks(conn, chunks, notify=notify, trace_context=trace,
                                     batch_id=batch_id)


def _chunk_bounds(total: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each chunk: FIRST_CHUNK jobs, then INSERT_CHUNK at a time."""
    start, end = 0, min(FIRST_CHUNK, total)
    while start < total:
        yield start, end
        start, end = end, min(end + INSERT_CHUNK, total)


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


async def enqueue_one_async(pool: Target, task: str | Callable,
                            payload: Mapping[str, Any] | None, conn: Any,
                            options: Mapping[str, Any]) -> int:
    """:func:`enqueue_one` on an ``AsyncConnection`` (the caller's transaction) or the pool's
    async engine; the row is built and checked before any connection is touched."""
    if conn is not None:
        conn = caller_async_connection(conn)
    row = build_job(pool.registry, task, payload, **options)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        write = functools.partial(sql.insert_one, row=row, notify_queue=pool.registry.notify,
                                  trace_context=trace)
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.begin() as own:
            return await own.run_sync(write)


async def enqueue_batch_async(pool: Target, jobs: Any, conn: Any) -> list[int]:
    """:func:`enqueue_batch` on an ``AsyncConnection``: the whole batch is checked first, then
    written in one statement (psycopg's pipeline is a sync-connection feature)."""
    if conn is not None:
        conn = caller_async_connection(conn)
    rows = build_batch(pool.registry, jobs)
    if not rows:
        return []
    with tracing.enqueue_span(None, None, len(rows)) as trace:
        write = functools.partial(sql.insert_jobs, rows=rows, notify=pool.registry.notify,
                                  trace_context=trace)
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.begin() as own:  # a taken key may raise after rows are in
            return await own.run_sync(write)
