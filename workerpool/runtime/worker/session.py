"""The worker's database session: its engine, the main loop's connection, and its time limits.

No transaction is ever open while a handler runs: every database call is its own short
transaction, bounded by ``statement_timeout``/``lock_timeout``: the connection's own settings,
given when it connects, or behind PgBouncer (where a server session is shared) set locally in
each transaction, one round trip more.
The same limits bound the maintenance loop's and the releaser's transactions.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from ... import sql
from ...model.errors import first_line
from ...sql import db

log = logging.getLogger("workerpool.worker")

#: Limits on every transaction the worker runs (seconds; set locally, PgBouncer-safe).
STATEMENT_TIMEOUT = 15.0
LOCK_TIMEOUT = 3.0
IDLE_IN_TRANSACTION_TIMEOUT = 15.0

#: What "the database is in trouble" looks like: retried with backoff, never a crash.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, psycopg.Error, OSError)

RECONNECT_MAX = 5.0  # cap of the backoff between attempts to reach the database

#: Seconds the main loop keeps one connection. PostgreSQL chooses, per prepared statement,
#: between its generic plan and a plan made for each call by comparing the generic plan's cost
#: with the average of the calls planned so far, and it never rebuilds a generic plan it has
#: turned down. An ANALYZE that saw a backlog prices the claim's generic plan at a tenth of the
#: backlog (``LIMIT $n``), so a connection that claimed through one planned every claim for the
#: rest of its life: 0.2 ms of the server's CPU per claim, long after the backlog drained. A
#: new connection makes the choice again on current statistics, for one new server session a
#: minute.
MAIN_CONNECTION_LIFETIME = 60.0


def session_limits() -> dict[str, str]:
    """The settings the worker's connections start with (not behind PgBouncer).

    The transaction limits, for statements that run outside a transaction of ours (the
    one-statement claim), and the planner settings, in force before the first statement on the
    connection is planned and prepared (``sql.planner``).
    """
    limits = sql.time_limits(
        statement_timeout=STATEMENT_TIMEOUT,
        lock_timeout=LOCK_TIMEOUT,
        idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT,
    )
    return {**limits, **sql.PLANNER_SETTINGS}


def bound(conn: Connection) -> None:
    """The time limits for the rest of ``conn``'s current transaction."""
    sql.bound_transaction(
        conn,
        statement_timeout=STATEMENT_TIMEOUT,
        lock_timeout=LOCK_TIMEOUT,
        idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT,
    )


@dataclass
class Reconnect:
    """Capped exponential delay between attempts to reach the database (a loop, not a crash)."""

    delay: float = 0.0
    failures: int = 0

    def failed(self) -> float:
        self.failures += 1
        self.delay = min(RECONNECT_MAX, 0.1 * 2 ** min(self.failures, 10))
        return self.delay

    def succeeded(self) -> None:
        self.failures, self.delay = 0, 0.0


class Session:
    """The engine of one worker process and the connection its main loop keeps across passes.

    Built before a fork, opened after it: ``__init__`` connects nothing.
    """

    def __init__(self, url: URL, queue: str, concurrency: int, *, pooled: bool = False) -> None:
        self.url = url
        self.queue = queue
        self.concurrency = concurrency
        self.engine: Engine | None = None
        self.pooled = pooled  # behind PgBouncer: no session state, no one-statement claim
        self.backoff = Reconnect()
        self.reached_db = False  # the current pass made a successful round trip
        self.last_contact = 0.0  # monotonic time of the last successful database round trip
        self._main_conn: Connection | None = None
        self._main_since = 0.0  # monotonic time the main connection was checked out

    def open(self) -> None:
        name = f"workerpool:{self.queue}"[:63]
        size = min(self.concurrency, 16) + 2  # handler checkpoints + the main loop
        # One flag for the engine's session limits and the claim path that relies on them.
        self.engine = db.create(
            self.url,
            application_name=name,
            pool_size=size,
            session_settings=session_limits(),
            pooled=self.pooled,
        )

    def close(self) -> None:
        self._drop_main_connection(broken=False)
        if self.engine is not None:
            self.engine.dispose()

    # -- the main loop's backoff ---------------------------------------------------------------

    def failed(self, exc: BaseException) -> None:
        delay = self.backoff.failed()
        log.warning(
            "database call failed (%s: %s); retrying in %.1fs",
            type(exc).__name__,
            first_line(exc),
            delay,
            extra={"event": "database_error", "queue": self.queue},
        )

    def succeeded(self) -> None:
        if self.backoff.failures:
            log.info(
                "database reachable again", extra={"event": "database_back", "queue": self.queue}
            )
        self.backoff.succeeded()

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, main_loop: bool = True) -> Iterator[Connection]:
        """One short, time-bounded transaction on the worker's engine.

        The main loop keeps one connection across passes: no pool checkout and pre-ping round
        trip per transaction. After any error it is invalidated, so the next pass checks out a
        fresh one (pinged by the pool). Handler threads (checkpoints) use pooled connections.
        """
        assert self.engine is not None, "Worker.run() opens the engine"
        if not main_loop:
            with self.engine.begin() as conn:
                self._bound(conn)
                yield conn
            return
        conn = self._main_connection()
        try:
            with conn.begin():
                self._bound(conn)
                yield conn
        except BaseException:
            self._drop_main_connection()
            raise
        self._contacted()

    def _bound(self, conn: Connection) -> None:
        """The time limits for this transaction. A connection of ours starts with them
        (:func:`session_limits`); behind PgBouncer a server session is shared, so they are set
        in each transaction, one round trip more."""
        if self.pooled:
            bound(conn)

    @contextmanager
    def single_statement(self) -> Iterator[Connection]:
        """The main connection in autocommit for one statement that is its own transaction.

        One round trip instead of four (BEGIN, limits, statement, COMMIT): the limits are the
        connection's own (:func:`session_limits`). Only where sessions are ours: behind
        PgBouncer, :meth:`transaction` instead.
        """
        conn = self._main_connection()
        # psycopg's own switch, not execution_options(isolation_level=...): on a connection
        # kept for the process's life, each of those calls leaves a reset callback on its pool
        # record that only a return to the pool clears (a leak of two objects per pass)
        dbapi = conn.connection.dbapi_connection
        try:
            dbapi.autocommit = True
            yield conn
            conn.commit()  # ends SQLAlchemy's autobegun block; nothing is sent
            dbapi.autocommit = False
        except BaseException:
            self._drop_main_connection()
            raise
        self._contacted()

    def _contacted(self) -> None:
        self.reached_db = True
        self.last_contact = time.monotonic()

    def _main_connection(self) -> Connection:
        now = time.monotonic()
        if self._main_conn is not None and now - self._main_since > MAIN_CONNECTION_LIFETIME:
            # invalidated, not returned to the pool: the next checkout is a new server session
            self._drop_main_connection()
        if self._main_conn is None:
            assert self.engine is not None
            self._main_conn = self.engine.connect()
            self._main_since = now
        return self._main_conn

    def _drop_main_connection(self, *, broken: bool = True) -> None:
        conn, self._main_conn = self._main_conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if broken:
                conn.invalidate()  # its state is unknown after an error: never reuse it
            conn.close()
            self.last_contact = time.monotonic()
