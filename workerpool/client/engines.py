"""A pool's database: its URL (given, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
PostgreSQL), its schema, the replica it may read from, and the engines made on them when first
needed; and who an operator is."""

from __future__ import annotations

import getpass
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from ..model.errors import ReplicaUnavailable, first_line
from ..model.validation import DEFAULT_SCHEMA, check_schema
from ..process import settings
from ..sql import autocommit, db

T = TypeVar("T")


class Engines:
    """A pool's URL (``url_arg``, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
    PostgreSQL) and the engines on it. Nothing connects until the first database call.

    ``schema`` (else ``$WORKERPOOL_SCHEMA``, else ``public``) is every connection's
    ``search_path``, carried by :attr:`url` (:func:`workerpool.sql.db.in_schema`).
    ``read_url`` (else ``$WORKERPOOL_READ_URL``, else the primary) is what :attr:`read_engine`
    connects to."""

    def __init__(
        self,
        url_arg: str | URL | None,
        schema: str | None = None,
        read_url: str | URL | None = None,
    ) -> None:
        self._url_arg = url_arg
        #: Behind PgBouncer in transaction pooling mode (``$WORKERPOOL_PGBOUNCER``, read once).
        self.pooled = settings.transaction_pooling()
        self.schema = check_schema(
            schema if schema is not None else settings.schema() or DEFAULT_SCHEMA
        )
        self._read_arg = read_url if read_url is not None else settings.read_url()
        self._url: URL | None = None
        self._read_url: URL | None = None
        self._engine: Engine | None = None
        self._read_engine: Engine | None = None
        self._async_engine: Any = None
        self._kept_closer: weakref.finalize | None = None  # made with the engine
        # the first use may come from several threads at once (a web app's first requests):
        # without it each would build an engine, and all but one would leak their connections
        self._made = threading.RLock()

    @property
    def named(self) -> bool:
        """Whether a server is named (the URL given, or ``$WORKERPOOL_DATABASE_URL``): if not,
        the first connection starts the embedded PostgreSQL."""
        return self._url_arg is not None or settings.database_url() is not None

    @property
    def url(self) -> URL:
        return self._once("_url", lambda: self._in_schema(database_url(self._url_arg)))

    @property
    def engine(self) -> Engine:
        return self._once("_engine", self._make_engine)

    def identity(self) -> str:
        """Which database and schema this pool means, password hidden, without connecting or
        starting the embedded PostgreSQL: what tells two apps' supervisors apart on a host."""
        given = self._url_arg if self._url_arg is not None else settings.database_url()
        if given is None:
            where = f"embedded:{settings.embedded_dir()}"
        else:
            where = db.redact(given)
        return f"{where} schema={self.schema}"

    def _make_engine(self) -> Engine:
        engine = db.create(self.url, pooled=self.pooled)
        # The connections that single writes keep checked out pin their engine (SQLAlchemy
        # holds on to a checked-out connection's pool): a pool dropped without dispose()
        # closes them as it goes, and so does the interpreter's exit.
        self._kept_closer = weakref.finalize(self, autocommit.close_kept, engine)
        return engine

    @property
    def replica(self) -> bool:
        """Whether reads go to a replica (a read URL is set)."""
        return self._read_arg is not None

    @property
    def read_url(self) -> URL:
        """The replica's URL in the pool's schema, else the primary's."""
        if self._read_arg is None:
            return self.url
        return self._once(
            "_read_url",
            lambda: self._in_schema(
                db.resolve_url(self._read_arg, embedded_dir=settings.embedded_dir())
            ),
        )

    @property
    def read_engine(self) -> Engine:
        """The engine of status, the dashboard's pages and the depth samples: on the replica
        when there is one (it never writes), else the pool's own engine."""
        if self._read_arg is None:
            return self.engine
        return self._once(
            "_read_engine",
            lambda: db.create(
                self.read_url, application_name="workerpool-read", pooled=self.pooled
            ),
        )

    @contextmanager
    def replica_errors(self) -> Iterator[None]:
        """Around reads of :attr:`read_engine`: a replica's failure (down, unreachable, a query
        cancelled by recovery) is ReplicaUnavailable, one line naming it. Reads do not fall back
        to the primary: a status that silently moved its load there would hide the outage."""
        try:
            yield
        except OperationalError as exc:
            if not self.replica:
                raise
            raise ReplicaUnavailable(
                f"the read replica {db.redact(self.read_url)} failed: {first_line(exc.orig or exc)}"
                " (reads do not fall back to the primary; unset WORKERPOOL_READ_URL to read it)"
            ) from None

    def _in_schema(self, url: URL) -> URL:
        return db.in_schema(url, self.schema)

    @property
    def async_engine(self) -> Any:
        return self._once("_async_engine", lambda: db.create_async(self.url, pooled=self.pooled))

    def _once(self, name: str, make: Callable[[], T]) -> T:
        """The attribute ``name``, made by ``make`` if it is still None (by one thread only)."""
        value: T | None = getattr(self, name)
        if value is None:
            with self._made:
                value = getattr(self, name)
                if value is None:
                    value = make()
                    setattr(self, name, value)
        return value

    def use_engine(self, engine: Engine) -> None:
        self._engine = engine

    def forget_engine(self) -> None:
        if self._kept_closer is not None:
            self._kept_closer.detach()
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                db.forget(engine)
        self._engine = self._read_engine = None
        self._made = threading.RLock()  # a thread of the parent may have held it at the fork

    def dispose(self) -> None:
        if self._read_engine is not None:
            self._read_engine.dispose()
        self._read_engine = None
        if self._kept_closer is not None:
            self._kept_closer()  # once; and it lets go of the engine
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None
        if self._async_engine is not None:
            import asyncio

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(self.dispose_async())
            else:
                raise RuntimeError("inside an event loop: await pool.dispose_async()")

    async def dispose_async(self) -> None:
        engine, self._async_engine = self._async_engine, None
        if engine is not None:
            await engine.dispose()
        self.dispose()


def database_url(url: str | URL | None = None) -> URL:
    """Where to connect: ``url``, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
    PostgreSQL (started, or attached to, in ``$WORKERPOOL_EMBEDDED_DIR``)."""
    given = url if url is not None else settings.database_url()
    return db.resolve_url(given, embedded_dir=settings.embedded_dir())


def default_actor() -> str:
    """Who runs an operator's command, for the history it leaves: ``user@host``."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
