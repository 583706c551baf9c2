"""Enqueue: writing checked jobs, one at a time or in a batch.

Every job is checked (:mod:`workerpool.model.new_job`) before anything is kept, and a write is
as few statements as it can be. One job is one INSERT (``sql.insert_one``): in the caller's
transaction, or in autocommit on a pooled connection without a ping (``sql.autocommit``).
A batch (:func:`_write_batch`) is one COPY when no job has a key (``sql.enqueue_copy``), else the
INSERT of ``sql.insert_job_chunks`` in chunks of :data:`INSERT_CHUNK`: in a transaction of
its own, or a savepoint in the caller's.

The asyncio driver (:func:`enqueue_one_async`, :func:`enqueue_batch_async`) runs the same
functions through ``AsyncConnection.run_sync``: one set of rules, two ways to reach the
database.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from sqlalchemy import Connection, Engine

from .. import sql
from ..model import tracing
from ..model.errors import InvalidJob
from ..model.new_job import NewJob, build_item, build_job, build_rows, job_items
from ..model.registry import Registry
from ..sql import autocommit, doors

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

    #: The testing seam (``WorkerPool.testing_mode``): told every id written.
    _enqueued: Callable[[Any, list[int]], None]


def enqueue_one(
    pool: Target,
    task: str | Callable,
    payload: Mapping[str, Any] | None,
    conn: Connection | None,
    options: Mapping[str, Any],
    *,
    batch_id: int | None = None,
) -> int:
    """One job in one INSERT: in the caller's transaction on ``conn``, else in autocommit.
    ``batch_id`` (with ``conn``): a member of that batch (``pool.batch``)."""
    row = build_job(pool.registry, task, payload, **options)
    if conn is not None:
        conn = caller_connection(conn)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        write = functools.partial(
            sql.insert_one,
            row=row,
            notify_queue=pool.registry.notify,
            trace_context=trace,
            batch_id=batch_id,
            max_pending=_bound(pool.registry, row.queue),
            own_transaction=conn is None,
        )
        return write(conn) if conn is not None else autocommit.write(pool.engine, write)


def enqueue_batch(
    pool: Target, jobs: Any, conn: Connection | None, *, batch_id: int | None = None
) -> list[int]:
    """Many jobs atomically, with one NOTIFY; ids in the order given (``pool.enqueue_many``).

    In a transaction of its own, or a savepoint in the caller's. A batch without keys is one
    COPY; a batch with a key needs ``ON CONFLICT``: the INSERT, in chunks of
    :data:`INSERT_CHUNK` jobs pipelined so the server inserts one while the next is checked.
    ``batch_id`` (with ``conn``): the new jobs are members of that batch.
    """
    items = job_items(jobs)
    if conn is not None:
        conn = caller_connection(conn)
    if not items:
        return []
    with tracing.enqueue_span(None, None, len(items)) as trace:
        write = functools.partial(
            _write_batch,
            registry=pool.registry,
            items=items,
            trace=trace,
            batch_id=batch_id,
            own=conn is None,
        )
        return write(conn) if conn is not None else autocommit.write(pool.engine, write)


def _write_batch(
    conn: Connection,
    *,
    registry: Registry,
    items: list[Any],
    trace: str | None,
    batch_id: int | None,
    own: bool,
) -> list[int]:
    """The batch on ``conn``: in a transaction of its own (``own``: the pool's connection),
    or a savepoint in the caller's transaction."""
    bounded = _any_bound(registry)
    if not _any_key(items) and sql.can_copy(conn):
        # Every row is checked before anything is sent: a bad one is refused with nothing
        # written (checking them as they stream gains nothing: Python is the faster side).
        rows = [build_item(registry, item) for item in items]
        if bounded:
            _check_rooms(registry, conn, rows)
        autocommit = _in_autocommit(conn)
        with nullcontext() if autocommit else conn.begin_nested():
            return sql.copy_jobs(
                conn.connection.driver_connection,
                rows,
                len(rows),
                notify=registry.notify,
                trace_context=trace,
                own_transaction=autocommit,
                batch_id=batch_id,
            )
    seen: dict[str, NewJob] = {}
    chunks: Iterable[list[NewJob]] = (
        build_rows(registry, items[start:end], seen) for start, end in _chunk_bounds(len(items))
    )
    with _atomically(conn, own):
        if bounded:  # every row first: the bound needs the counts before a chunk is sent
            chunks = list(chunks)
            _check_rooms(registry, conn, [row for chunk in chunks for row in chunk])
        return sql.insert_job_chunks(
            conn, chunks, notify=registry.notify, trace_context=trace, batch_id=batch_id
        )


# -- bounded queues -------------------------------------------------------------------------------


def _bound(registry: Registry, queue: str) -> int | None:
    """The bound the pool declares for ``queue`` (``max_pending``), None if unbounded: an
    unbounded queue pays this lookup; a bounded one's room is checked in the INSERT itself."""
    spec = registry.queues.get(queue)
    return None if spec is None else spec.max_pending


def _any_bound(registry: Registry) -> bool:
    return any(spec.max_pending is not None for spec in registry.queues.values())


def _check_rooms(registry: Registry, conn: Connection, rows: list[NewJob]) -> None:
    """QueueFull (nothing written) unless each bounded queue has room for its rows."""
    for queue, adding in Counter(row.queue for row in rows).items():
        bound = _bound(registry, queue)
        if bound is not None:
            doors.check_room(conn, queue, adding, bound)


def _any_key(items: list[Any]) -> bool:
    """Whether an item asks for a key (a keyed batch needs ``ON CONFLICT``: an INSERT)."""
    return any(
        len(item) == 3 and isinstance(item[2], Mapping) and item[2].get("key") is not None
        for item in items
        if isinstance(item, tuple | list)
    )


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
        hint = (
            "; for an AsyncConnection use the call's _async twin (enqueue_async, "
            "chain_async, cancel_async ...)"
            if _is_async(conn)
            else ""
        )
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


def _atomically(conn: Connection, own: bool) -> AbstractContextManager:
    """All or nothing for several statements on ``conn``: a transaction of its own on a
    connection in autocommit or of the pool's (``own``), else a savepoint in the caller's
    transaction."""
    if _in_autocommit(conn):
        return conn.connection.driver_connection.transaction()
    return conn.begin() if own else conn.begin_nested()


def _in_autocommit(conn: Connection) -> bool:
    """Whether ``conn`` is on psycopg 3's sync driver in autocommit (where a transaction is
    the driver's to open: SQLAlchemy's would be a no-op)."""
    driver = conn.connection.driver_connection
    return isinstance(driver, psycopg.Connection) and driver.autocommit


# -- asyncio --------------------------------------------------------------------------------------


async def enqueue_one_async(
    pool: Target,
    task: str | Callable,
    payload: Mapping[str, Any] | None,
    conn: Any,
    options: Mapping[str, Any],
) -> int:
    """:func:`enqueue_one` on an ``AsyncConnection`` (the caller's transaction) or the pool's
    async engine; the row is built and checked before any connection is touched."""
    if conn is not None:
        conn = caller_async_connection(conn)
    row = build_job(pool.registry, task, payload, **options)
    with tracing.enqueue_span(row.queue, row.task) as trace:
        write = functools.partial(
            sql.insert_one,
            row=row,
            notify_queue=pool.registry.notify,
            trace_context=trace,
            max_pending=_bound(pool.registry, row.queue),
            own_transaction=conn is None,
        )
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.connect() as own:
            await own.execution_options(isolation_level="AUTOCOMMIT")
            return await own.run_sync(write)


async def enqueue_batch_async(pool: Target, jobs: Any, conn: Any) -> list[int]:
    """:func:`enqueue_batch` on an ``AsyncConnection``: the same checks and the same INSERT,
    its chunks sent one after another (COPY and the pipeline are the sync driver's)."""
    if conn is not None:
        conn = caller_async_connection(conn)
    items = job_items(jobs)
    if not items:
        return []
    with tracing.enqueue_span(None, None, len(items)) as trace:
        write = functools.partial(
            _write_batch,
            registry=pool.registry,
            items=items,
            trace=trace,
            batch_id=None,
            own=conn is None,
        )
        if conn is not None:
            return await conn.run_sync(write)
        async with pool.async_engine.connect() as own:
            return await own.run_sync(write)
