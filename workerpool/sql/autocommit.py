"""A write on a pooled connection in autocommit, without the pre-ping's round trip.

The engine pings a pooled connection as it is checked out (:func:`ping_on_checkout`, the
pessimistic disconnect handling SQLAlchemy documents, as a pool ``checkout`` listener). An
enqueue without ``conn=`` takes one of the few connections that such writes keep checked out
between calls, in autocommit (:class:`_Kept`), skips that ping and checks the connection
itself, at no round trip:

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

import os
import select
import threading
import time
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
#: Connections an engine's single writes keep at most; the rest of its pool serves all else.
KEPT = 2
#: A kept connection goes back to the pool after this long (seconds): the pool recycles its
#: connections after an hour (``db.engine_options``), and pings them when they come out.
KEPT_FOR = 600.0
#: Where an engine holds its kept connections: on the engine itself, so that an engine dropped
#: without ``dispose()`` is collected with them (a registry beside it would keep both alive).
_KEPT = "_workerpool_kept"
_KEPT_LOCK = threading.Lock()
_INHERITED: list[Any] = []  # kept connections inherited over a fork: the parent's sockets


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
    """Run ``statements(connection)`` in autocommit on one of ``engine``'s connections that
    single writes keep checked out between calls (:class:`_Kept`), without a ping.

    When a statement could not be sent at all, ``statements`` runs once more on a connection
    checked out with the ping.
    """
    kept = _kept(engine)
    conn, since = kept.take()
    try:
        return _run(conn, statements)
    except sa_exc.DBAPIError as exc:
        if not _unsent(exc):
            raise
        conn.invalidate(exc)
    finally:
        kept.give(conn, since)
    with engine.connect() as conn, _autocommit(conn):
        return _run(conn, statements)


def close_kept(engine: Engine) -> None:
    """Close the connections kept for ``engine``'s single writes (in a forked child: forget
    them). ``engine.dispose()`` does it too."""
    kept = engine.__dict__.pop(_KEPT, None)
    if kept is not None:
        kept.close()


def forget_kept(engine: Engine) -> None:
    """In a forked child: drop the kept connections without a word on their sockets, which are
    the parent's (closing one there would end the parent's session)."""
    kept = engine.__dict__.pop(_KEPT, None)
    if kept is not None:
        kept.forget()


class _Kept:
    """Up to :data:`KEPT` connections of one engine's pool, kept checked out and in autocommit
    between single writes, last used first.

    Checking a connection out of SQLAlchemy's pool and back (the ``Connection``, the pool's
    queue, its events, the autocommit set and reset, the reset's rollback) costs a single
    enqueue about a third of its client CPU; a kept one costs a list's pop and append and the
    socket check of :func:`looks_usable`. They stay within the pool's own limit (its size and
    overflow); a connection that is no longer clean (a transaction left open, invalidated, not
    idle) or that was kept for :data:`KEPT_FOR` goes back to the pool, where its recycling and
    ping apply. More concurrent writers than :data:`KEPT` use the pool as before.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.idle: list[tuple[Connection, float]] = []
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def take(self) -> tuple[Connection, float]:
        """A kept connection that looks usable, else a new one from the pool (unpinged, or
        pinged when it looks unusable), with when it was first kept."""
        if self.pid != os.getpid():
            self.forget()
        while True:
            with self.lock:
                if not self.idle:
                    break
                conn, since = self.idle.pop()
            if time.monotonic() - since < KEPT_FOR and looks_usable(_driver(conn)):
                return conn, since
            _release(conn)
        return _unpinged(self.engine), time.monotonic()

    def give(self, conn: Connection, since: float) -> None:
        """Keep ``conn`` for the next write if it is clean and there is room; else return it."""
        if conn.in_transaction() and not conn.invalidated:
            try:  # SQLAlchemy's autobegin; the driver, in autocommit, holds none
                conn.rollback()
            except sa_exc.SQLAlchemyError:
                conn.invalidate()
        if _clean(conn) and self.pid == os.getpid():
            with self.lock:
                if len(self.idle) < KEPT:
                    self.idle.append((conn, since))
                    return
        _release(conn)

    def close(self) -> None:
        """Close the kept connections (the engine is disposed, or its owner gone); in a forked
        child, forget them instead."""
        if self.pid != os.getpid():
            self.forget()
            return
        with self.lock:
            idle, self.idle = self.idle, []
        for conn, _ in idle:
            conn.invalidate()  # closes the driver's connection, not only the pool's handle
            conn.close()

    def forget(self) -> None:
        _INHERITED.extend(self.idle)  # never collected: a finalizer could write to the socket
        self.idle, self.lock, self.pid = [], threading.Lock(), os.getpid()


def _kept(engine: Engine) -> _Kept:
    """The connections kept for ``engine``, closed by its ``dispose()``."""
    kept = engine.__dict__.get(_KEPT)
    if kept is None:
        with _KEPT_LOCK:
            kept = engine.__dict__.get(_KEPT)
            if kept is None:
                kept = _Kept(engine)
                setattr(engine, _KEPT, kept)
                event.listen(engine, "engine_disposed", close_kept)
    return kept


def _driver(conn: Connection) -> Any:
    return conn.connection.driver_connection


def _clean(conn: Connection) -> bool:
    """Open, valid, outside any transaction, and in the autocommit it was kept in."""
    if conn.closed or conn.invalidated or conn.in_transaction():
        return False
    driver = _driver(conn)
    return (
        not driver.closed
        and driver.autocommit
        and driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def _release(conn: Connection) -> None:
    """Back to the pool, out of autocommit (the pool's other users expect transactions); an
    invalidated or broken connection is discarded instead."""
    if not conn.invalidated and not conn.closed:
        driver = _driver(conn)
        if driver.closed or not looks_usable(driver):
            conn.invalidate()
        else:
            driver.autocommit = False
    conn.close()


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
        raise sa_exc.DBAPIError.instance(
            None, None, exc, psycopg.Error, connection_invalidated=disconnect, dialect=conn.dialect
        ) from exc


def _unsent(exc: sa_exc.DBAPIError) -> bool:
    """Whether ``exc`` is a failure to send a statement (nothing of it reached the server)."""
    return isinstance(exc.orig, psycopg.OperationalError) and str(exc.orig).startswith(_UNSENT)


def _unpinged(engine: Engine) -> Connection:
    """A connection from ``engine``'s pool checked out without the ping, or, when it does not
    look usable, replaced by one checked out with it; in autocommit."""
    token = _UNPINGED.set(True)
    try:
        conn = engine.connect()
    finally:
        _UNPINGED.reset(token)
    try:
        if not looks_usable(_driver(conn)):
            conn.invalidate()
            conn.connection  # checks out another connection, with the ping
        _driver(conn).autocommit = True
    except BaseException:
        conn.close()
        raise
    return conn


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
