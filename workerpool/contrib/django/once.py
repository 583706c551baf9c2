"""Effects that happen once in a Django task: its ORM writes and its job's ``done`` commit in
one ``transaction.atomic()`` block, on Django's own connection (:func:`complete_in`), as do a
step's effect and its record (:func:`step`).

workerpool's fenced completion is SQLAlchemy Core. Here it runs on the psycopg connection the
caller's atomic block holds, lent to SQLAlchemy for one call, so every statement is the one the
SQLAlchemy path runs (the lease fence, then what follows a job's end). The transaction stays
Django's: the lent connection's commit, rollback and close do nothing, and only the block's end
commits or rolls back the effect and the ``done`` together.

Django's ORM and ``transaction.atomic`` are sync-only, so an ``async def`` task calls these from
a sync function it runs with ``sync_to_async``: asgiref runs it in a copy of the task's context
(:data:`RUNNING` goes with it), on that thread's Django connection. On the event loop itself
they are refused: no atomic block can be open there, and the loop is every async task's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.transaction import TransactionManagementError
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import JsonbLoader, JsonLoader
from psycopg.types.net import CidrLoader, InetLoader
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

from ...model.errors import CompletionRefused
from ...model.job import Job

#: The workerpool job whose Django task is running in this context (None outside one).
RUNNING: ContextVar[Job | None] = ContextVar("workerpool_django_job", default=None)

#: Django loads these types its own way (JSON as text, addresses as text, times in its
#: TIME_ZONE); workerpool's statements read them as on its own connections.
_LOADERS: dict[str, type[Any]] = {
    "json": JsonLoader,
    "jsonb": JsonbLoader,
    "inet": InetLoader,
    "cidr": CidrLoader,
    "timestamptz": TimestamptzLoader,
}


def complete_in(result: Any = None, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """End the running task's job ``done`` (with ``result``) in the open
    ``transaction.atomic(using=using)`` block: the block's writes and the completion commit
    together, or neither. :meth:`workerpool.Job.complete_in`'s rules and errors, plus a
    ``CompletionRefused`` outside an atomic block or a running task (nothing written)."""
    job = running_job("complete_in")
    with lent(using, job.id) as conn:
        job.complete_in(conn, result)


def step(name: str, fn: Callable[[], Any], *, using: str = DEFAULT_DB_ALIAS) -> Any:
    """:meth:`workerpool.Job.step` with its record written in the open
    ``transaction.atomic(using=using)`` block: ``fn``'s ORM writes and the record commit
    together, or neither; a later run returns the stored value without calling ``fn``."""
    job = running_job("step")
    with lent(using, job.id) as conn:
        return job.step(name, fn, conn=conn)


def running_job(what: str) -> Job:
    """The job of the task running in this context, called off the event loop (refused, with
    nothing written, outside a running task or on an async task's event loop)."""
    job = RUNNING.get()
    if job is None:
        raise CompletionRefused(f"{what} called outside a running workerpool task")
    if _on_event_loop():
        raise CompletionRefused(
            f"job {job.id}: {what} called on the event loop of an async task; call it in"
            " transaction.atomic() inside a sync function run with sync_to_async;"
            " nothing written"
        )
    return job


def _on_event_loop() -> bool:
    """Whether an event loop runs in this thread (Django's own test for async-unsafe calls)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextmanager
def lent(using: str, job_id: int) -> Iterator[Connection]:
    """Django's connection ``using`` as a SQLAlchemy Connection in its atomic block's
    transaction; refused (nothing written) outside a block, in a block already broken by an
    error, or on a database that is not PostgreSQL through psycopg 3."""
    wrapper = connections[using]
    if not wrapper.in_atomic_block:
        raise CompletionRefused(
            f"job {job_id}: not inside transaction.atomic(using={using!r}); nothing written"
        )
    try:
        wrapper.validate_no_broken_transaction()
    except TransactionManagementError as exc:
        raise CompletionRefused(f"job {job_id}: {exc}") from None
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise CompletionRefused(
            f"job {job_id}: DATABASES[{using!r}] is not PostgreSQL through psycopg 3"
        )
    token = _LENDING.set(_Lent(raw))
    try:
        with _engine().connect() as conn:
            conn.begin()  # SQLAlchemy's view of the block's transaction: it emits no BEGIN
            yield conn
    finally:
        _LENDING.reset(token)


class _Lent:
    """Django's psycopg connection as SQLAlchemy's DBAPI connection for one call: the
    transaction is Django's block's, so ending it or the connection here does nothing."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return self._raw.cursor(*args, **kwargs)
        # Django's cursor factory binds on the client; SQLAlchemy's statements expect
        # psycopg's own cursor, with psycopg's loaders for the types Django reloads.
        cursor = psycopg.Cursor(self._raw)
        for name, loader in _LOADERS.items():
            cursor.adapters.register_loader(name, loader)
        return cursor

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass

    def add_notice_handler(self, handler: Any) -> None:
        pass  # SQLAlchemy adds one per connect; Django's connection would collect them


_LENDING: ContextVar[_Lent | None] = ContextVar("workerpool_django_lending", default=None)


def _lending() -> _Lent:
    lent = _LENDING.get()
    assert lent is not None, "a Django connection is lent only inside lent()"
    return lent


@cache
def _engine() -> Engine:
    """One engine per process for lent connections: no pool (each connect takes the lent
    one), no reset on return, and no hstore lookup on a connection that is not its own."""
    return create_engine(
        "postgresql+psycopg://",
        creator=_lending,
        poolclass=NullPool,
        pool_reset_on_return=None,
        use_native_hstore=False,
    )


__all__ = ["RUNNING", "complete_in", "lent", "running_job", "step"]
