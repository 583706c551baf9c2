"""One write that is one statement, in autocommit, on a pooled connection: no pre-ping.

The engine pings every connection it hands out (``pool_pre_ping``), a round trip before the
caller's own. An enqueue without ``conn=`` is one statement, so it goes without the ping and
checks the connection itself, at no round trip:

- before sending, the pooled connection must look usable to the driver (not closed, idle, no
  transaction) and its socket must have nothing to read: a server that ended the session
  (restart, ``pg_terminate_backend``, an idle timeout, a proxy) has sent an error and closed the
  socket, so a dead connection reads as readable. Any doubt, and the connection is discarded and
  the write goes to a connection checked out the engine's usual way (pinged).
- if sending the statement fails (the driver reports it could not send or flush it), the
  server never received a whole statement, which ran nothing: the write is retried once on
  such a connection.
- any failure once the statement was sent is raised, never retried: in autocommit the server
  may have committed it before the connection broke, and a retry could enqueue the job twice.

A connection that dies silently (a network partition) passes the check like it passes a
ping's first step; the statement then fails after the libpq timeouts (``db.CONNECT_ARGS``), as
the ping would have.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import psycopg
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

T = TypeVar("T")

_UNPINGED: ContextVar[bool] = ContextVar("workerpool_unpinged", default=False)
#: Messages of psycopg errors raised before the whole statement reached the server.
_UNSENT = ("sending ", "flushing failed", "the connection is closed")


def skip_ping_when_asked(engine: Engine) -> Engine:
    """Let :func:`checkout` take a connection from ``engine``'s pool without its pre-ping."""
    dialect = engine.dialect
    ping = dialect.do_ping

    def do_ping(dbapi_connection: Any) -> bool:
        return True if _UNPINGED.get() else ping(dbapi_connection)

    dialect.do_ping = do_ping  # type: ignore[method-assign]
    return engine


def write(engine: Engine, statement: Callable[[Any], T]) -> T:
    """Run ``statement(cursor)`` in autocommit on a pooled connection, without a pre-ping.

    The statement is sent once, or, when it could not be sent at all, once more on a connection
    checked out with the ping. Driver errors are raised as SQLAlchemy's, as
    ``engine.connect()`` would raise them.
    """
    with checkout(engine) as fairy:
        try:
            return _run(engine, fairy, statement)
        except psycopg.OperationalError as exc:
            if not str(exc).startswith(_UNSENT):
                raise _wrapped(engine, exc, fairy) from exc
            fairy.invalidate(exc)
    with _pinged(engine) as fairy:
        try:
            return _run(engine, fairy, statement)
        except psycopg.Error as exc:
            raise _wrapped(engine, exc, fairy) from exc


def _run(engine: Engine, fairy: Any, statement: Callable[[Any], T]) -> T:
    driver = fairy.driver_connection
    driver.autocommit = True
    try:
        with driver.cursor() as cursor:
            return statement(cursor)
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        raise _wrapped(engine, exc, fairy) from exc
    finally:
        if not driver.closed:
            driver.autocommit = False  # the pool's other users expect transactions


@contextmanager
def checkout(engine: Engine) -> Iterator[Any]:
    """A pooled DBAPI connection (SQLAlchemy's pool entry) checked out without the pre-ping,
    or, when it does not look usable, one checked out with it."""
    token = _UNPINGED.set(True)
    try:
        fairy = engine.raw_connection()
    finally:
        _UNPINGED.reset(token)
    if not looks_usable(fairy.driver_connection):
        fairy.invalidate()
        fairy.close()
        fairy = engine.raw_connection()
    try:
        yield fairy
    finally:
        fairy.close()


@contextmanager
def _pinged(engine: Engine) -> Iterator[Any]:
    fairy = engine.raw_connection()
    try:
        yield fairy
    finally:
        fairy.close()


def looks_usable(driver: Any) -> bool:
    """Idle, open, and nothing waiting on its socket (what a closed session leaves there)."""
    if driver.closed or driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        fd = driver.fileno()
        if hasattr(select, "poll"):  # any descriptor number (select() stops at 1024)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return not poller.poll(0)
        return not select.select([fd], [], [], 0)[0]
    except (OSError, ValueError, psycopg.Error):
        return False


def _wrapped(engine: Engine, exc: psycopg.Error, fairy: Any) -> Exception:
    """The driver's error as SQLAlchemy raises it; a lost connection leaves the pool."""
    disconnect = engine.dialect.is_disconnect(exc, fairy.driver_connection, None)
    if disconnect:
        fairy.invalidate(exc)
    return sa_exc.DBAPIError.instance(None, None, exc, psycopg.Error,
                                      connection_invalidated=disconnect, dialect=engine.dialect)
