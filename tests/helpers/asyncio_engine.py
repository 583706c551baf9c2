"""A test's coroutine on a caller's own AsyncEngine (psycopg async), as an application would
hold one; both it and the pool's async engine are disposed afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from workerpool import WorkerPool


def on_own_async_engine(app: WorkerPool, body: Callable[[AsyncEngine], Awaitable[Any]]) -> Any:
    """Run ``body(engine)`` to its end and return what it returned."""

    async def main() -> Any:
        engine = create_async_engine(app.url.set(drivername="postgresql+psycopg_async"))
        try:
            return await body(engine)
        finally:
            await engine.dispose()
            await app.dispose_async()

    return asyncio.run(main())
