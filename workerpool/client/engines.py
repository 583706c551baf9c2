"""A pool's database: its URL (given, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
PostgreSQL) and the engines made on it when first needed; and who an operator is."""

from __future__ import annotations

import getpass
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from ..process import settings
from ..sql import db

T = TypeVar("T")


class Engines:
    """A pool's URL (``url_arg``, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
    PostgreSQL) and the engines on it. Nothing connects until the first database call."""

    def __init__(self, url_arg: str | URL | None) -> None:
        self._url_arg = url_arg
        #: Behind PgBouncer in transaction pooling mode (``$WORKERPOOL_PGBOUNCER``, read once).
        self.pooled = settings.transaction_pooling()
        self._url: URL | None = None
        self._engine: Engine | None = None
        self._async_engine: Any = None
        # the first use may come from several threads at once (a web app's first requests):
        # without it each would build an engine, and all but one would leak their connections
        self._made = threading.RLock()

    @property
    def url(self) -> URL:
        return self._once("_url", lambda: database_url(self._url_arg))

    @property
    def engine(self) -> Engine:
        return self._once("_engine", lambda: db.create(self.url, pooled=self.pooled))

    @property
    def async_engine(self) -> Any:
        return self._once("_async_engine",
                          lambda: db.create_async(self.url, pooled=self.pooled))

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
        if self._engine is not None:
            self._engine.dispose(close=False)
        self._engine = None
        self._made = threading.RLock()  # a thread of the parent may have held it at the fork

    def dispose(self) -> None:
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
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None


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
