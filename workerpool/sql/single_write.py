"""A write on a pooled connection in autocommit, without the pre-ping's round trip.

The engine pings a pooled connection as it is checked out (:func:`ping_on_checkout`, the
pessimistic disconnect handling SQLAlchemy documents, as a pool ``checkout`` listener). An
enqueue without ``conn=`` skips that ping and checks the connection itself, at no round trip:

- before sending, the pooled connection must look usable to the driver (not closed, idle, no
  transaction) and its socket must have nothing to read: a server that ended the session
  (restart, ``pg_terminate_backend``, an idle timeout, a proxy) has sent an error and closed the
  socket, so a dead connection reads as readable. Any doubt, and the connection is discarded and
  the write goes to a connection checked out the usual way (pinged).
- if sending a statement fails (the driver reports it could not send or flush it), the server
  never received it: the write is retried once on such a connection. Every write given here
  can run again after that: one job without a key is one statement; a job with a key finds
  its own earlier row by the key; a batch runs in a transaction the broken connection ended.
- any failure once a statement was sent is raised, never retried: in autocommit the server may
  have committed it before the connection broke, and a retry could enqueue the job twice.

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
from sqlalchemy import Connection, Engine, event
from sqlalchemy import exc as sa_exc

T = TypeVar("T")

_UNPINGED: ContextVar[bool] = ContextVar("workerpool_unpinged", default=False)
#: Messages of psycopg errors raised before the whole statement reached the server.
_UNSENT = ("sending ", "flushing failed", "the connection is closed")
_FRESH = "workerpool_fresh"


def ping_on_checkout(engine: Engine) -> Engine:
    """Ping each pooled connection as it is checked out, except a fresh one and one taken by
    :func:`write`; a failed ping makes the pool discard it and check out another."""
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def fresh(dbapi_connection: Any, record: Any) -> None:
        record.info[_FRESH] = True

    @event.listens_for(engine, "checkout")
    def ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if record.info.pop(_FRESH, False) or _UNPINGED.get():
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            raise sa_exc.DisconnectionError(str(exc)) from exc

    return engine


def write(engine: Engine, statements: Callable[[Connection], T]) -> T:
    """Run ``statements(connection)`` in autocommit on a pooled connection, without a ping.

    When a statement could not be sent at all, ``statements`` runs once more on a connection
    checked out with the ping.
    """
    with _unpinged(engine) as conn:
        try:
            return _run(conn, statements)
        except sa_exc.DBAPIError as exc:
            if not _unsent(exc):
                raise
            conn.invalidate(exc)
    with engine.connect() as conn, _autocommit(conn):
        return _run(conn, statements)


def _run(conn: Connection, statements: Callable[[Connection], T]) -> T:
    """``statements(conn)``; an error from the driver's own calls (COPY, a pipeline) is raised
    as SQLAlchemy's, as ``conn.execute`` raises it, and a lost connection leaves the pool."""
    try:
        return statements(conn)
    except psycopg.Error as exc:
        driver = conn.connection.driver_connection
        disconnect = conn.dialect.is_disconnect(exc, driver, None)
        if disconnect:
            conn.invalidate(exc)
        raise sa_exc.DBAPIError.instance(None, None, exc, psycopg.Error,
                                         connection_invalidated=disconnect,
                                         dialect=conn.dialect) from exc


def _unsent(exc: sa_exc.DBAPIError) -> bool:
    """Whether ``exc`` is a failure to send a statement (nothing of it reached the server)."""
    return isinstance(exc.orig, psycopg.OperationalError) and str(exc.orig).startswith(_UNSENT)


@contextmanager
def _unpinged(engine: Engine) -> Iterator[Connection]:
    """A connection from ``engine``'s pool checked out without the ping, or, when it does not
    look usable, replaced by one checked out with it; in autocommit."""
    token = _UNPINGED.set(True)
    try:
        conn = engine.connect()
    finally:
        _UNPINGED.reset(token)
    with conn:
        if not looks_usable(conn.connection.driver_connection):
            conn.invalidate()
            conn.connection  # checks out another connection, with the ping
        with _autocommit(conn):
            yield conn


@contextmanager
def _autocommit(conn: Connection) -> Iterator[None]:
    """The driver's autocommit, set directly: SQLAlchemy's ``isolation_level`` execution
    option sets and resets it through the dialect, ~60 µs of client CPU a single enqueue
    (of ~300; ``python -m bench --only single`` shows the client CPU)."""
    driver = conn.connection.driver_connection
    driver.autocommit = True
    try:
        yield
    finally:
        if not driver.closed:
            driver.autocommit = False  # the pool's other users expect transactions


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
