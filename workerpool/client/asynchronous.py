"""The asyncio twins of the pool's calls: each on an ``AsyncConnection`` (the caller's
transaction) or the pool's async engine, through ``run_sync``: the same statements, checks
and errors as the sync call. (``enqueue_async``, ``enqueue_many_async`` and ``result_async``
write and wait natively; they live with their sync twins.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import Connection

from ..model.batch import PAGE_SIZE, BatchStatus, MemberResult
from ..model.cancel import CancelResult
from ..model.results import JobInfo
from . import batches, results
from .acting import actor
from .enqueue import caller_async_connection
from .explained import explained

if TYPE_CHECKING:
    from . import WorkerPool

T = TypeVar("T")


class AsyncCalls:
    """What :class:`~workerpool.client.WorkerPool` offers for asyncio beyond its writes."""

    @property
    def _pool(self) -> WorkerPool:
        return cast("WorkerPool", self)  # a mixin of WorkerPool, and of nothing else

    async def _on_async(
        self, conn: Any, call: Callable[[Connection], T], *, write: bool = True
    ) -> T:
        """``call(connection)`` on the caller's ``AsyncConnection`` (in its transaction), else on
        the pool's async engine: in a transaction of its own when it ``write``s."""
        result: T
        if conn is not None:
            result = await caller_async_connection(conn).run_sync(call)
        elif write:
            async with self._pool.async_engine.begin() as own:
                result = await own.run_sync(call)
        else:
            async with self._pool.async_engine.connect() as own:
                result = await own.run_sync(call)
        return result

    async def chain_async(
        self, steps: Iterable[Any], *, conn: Any = None, key: str | None = None
    ) -> list[int]:
        """:meth:`chain` for asyncio (``conn=``: an ``AsyncConnection``)."""
        return await self._on_async(conn, lambda sync: self._pool.chain(steps, conn=sync, key=key))

    @explained
    async def job_async(self, job_id: int) -> JobInfo:
        """:meth:`job` for asyncio, on the pool's async engine."""
        return await results.read_async(self._pool, job_id)

    @explained
    async def batch_status_async(self, batch_id: int) -> BatchStatus:
        """:meth:`batch_status` for asyncio, on the pool's async engine."""
        return await self._on_async(
            None, lambda sync: batches.status_on(sync, batch_id), write=False
        )

    def batch_results_async(
        self, batch_id: int, *, page_size: int = PAGE_SIZE
    ) -> AsyncIterator[MemberResult]:
        """:meth:`batch_results` for asyncio: ``async for member in ...``, a page at a time
        (the id is checked, and the batch looked up, on the first iteration)."""
        return batches.results_async(self._pool, batch_id, page_size)

    async def signal_async(self, name: str, payload: Any = None, *, conn: Any = None) -> datetime:
        """:meth:`signal` for asyncio (``conn=``: an ``AsyncConnection``)."""
        return await self._on_async(conn, lambda sync: self._pool.signal(name, payload, conn=sync))

    async def cancel_async(
        self, ids: Iterable[int] | None = None, *, conn: Any = None, **options: Any
    ) -> CancelResult:
        """:meth:`cancel` for asyncio (``conn=``: an ``AsyncConnection``; the same keywords)."""
        options["by"] = actor(options.get("by"))  # the caller's context, not run_sync's
        return await self._on_async(conn, lambda sync: self._pool.cancel(ids, conn=sync, **options))

    async def pause_async(
        self,
        queue: str,
        *,
        by: str | None = None,
        known: Iterable[str] | None = None,
        conn: Any = None,
    ) -> None:
        """:meth:`pause` for asyncio (``conn=``: an ``AsyncConnection``)."""
        by = actor(by)  # read here: the caller's context, not run_sync's greenlet
        await self._on_async(
            conn, lambda sync: self._pool.pause(queue, by=by, known=known, conn=sync)
        )

    async def resume_async(
        self,
        queue: str,
        *,
        by: str | None = None,
        known: Iterable[str] | None = None,
        conn: Any = None,
    ) -> None:
        """:meth:`resume` for asyncio (``conn=``: an ``AsyncConnection``)."""
        by = actor(by)
        await self._on_async(
            conn, lambda sync: self._pool.resume(queue, by=by, known=known, conn=sync)
        )
