"""The database engines of one WorkerPool: its URL, its engine and its async engine, each made
on first use, once, and closed on dispose."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from . import db


class Engines:
    """A pool's URL (``url_arg``, else ``$WORKERPOOL_DATABASE_URL``, else the embedded
    PostgreSQL) and the engines on it. Nothing connects until the first database call."""

    def __init__(self, url_arg: str | URL | None) -> None:
        self._url_arg = url_arg
        self._url: URL | None = None
        self._engine: Engine | None = None
        self._async_engine: Any = None
        # the first use may come from several threads at once (a web app's first requests):
        # without it each would build an engine, and all but one would leak their connections
        self._made = threading.RLock()

    @property
    def url(self) -> URL:
        if self._url is None:
            with self._made:
                if self._url is None:
                    self._url = db.resolve_url(self._url_arg)
        return self._url

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._made:
                if self._engine is None:
                    self._engine = db.create(self.url)
        return self._engine

    @property
    def async_engine(self) -> Any:
        if self._async_engine is None:
            with self._made:
                if self._async_engine is None:
                    self._async_engine = db.create_async(self.url)
        return self._async_engine

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
