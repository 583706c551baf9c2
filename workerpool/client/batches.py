"""Batches, the client's calls: ``pool.batch`` (fan out into member jobs, fan in with a callback
that runs exactly once), ``pool.batch_status`` and ``pool.batch_results``.

::

    with pool.batch(on_complete="report_ready", payload={"period": "2026-11"},
                    key="report:2026-11") as batch:
        for uid in user_ids:
            batch.enqueue("monthly_report", {"user": uid}, key=f"report:2026-11:{uid}")
    pool.batch_status(batch.id)

The batch row and its members are written in one transaction (the batch's own, or the caller's
with ``conn=``, in a savepoint). When the last member reaches a final state (done, dead or
cancelled), the transaction of that outcome inserts the callback jobs: ``on_complete`` always,
``on_success`` when every member is done, ``on_failure`` when any is dead or cancelled; each
with the batch's payload, and ``job.batch_id`` naming the batch. The database decides which
outcome is the last (:mod:`.batches`); a batch with no member finishes when its ``with`` block
ends. What a batch is without the database (its callbacks, its status) is
:mod:`workerpool.model.batch`'s.

Keys, and running a coordinator twice:

- A member whose key is already held by a job of this batch is that member (nothing written).
- A member whose key is held by a job *outside* this batch is not a member: that job is not
  enqueued again, the batch does not wait for it and does not count it. ``batch.enqueue``
  returns its id, and :attr:`Batch.outside` lists it, so the coordinator can tell.
- ``key=`` names the batch itself: opening a batch under a key that exists reopens that batch
  (same callbacks and payload, else IdempotencyConflict). New members join it while it is open;
  once it has finished it takes none (:class:`BatchFinished`), but enqueueing a member it already
  has returns that member's id. So a coordinator that may run twice passes a batch key and
  member keys, and its second run writes nothing.

A dead member replayed after its batch finished runs again, and its new result shows in
``batch_status`` and ``batch_results``, but the batch stays finished: no callback fires twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import Connection

from ..model.batch import (
    PAGE_SIZE,
    RESULT_ORDER,
    BatchStatus,
    MemberResult,
    callback_templates,
    status_of,
)
from ..model.errors import (
    BatchClosed,
    BatchFinished,
    IdempotencyConflict,
    InvalidJob,
    UnknownBatch,
)
from ..model.new_job import build_job
from ..model.payload import check_key, dumps
from ..model.results import check_id
from ..sql import batches
from .enqueue import Target, caller_async_connection, caller_connection, enqueue_batch
from .workflows import enqueue_many_linked, enqueue_one_or_linked, has_links


class Batch:
    """An open batch (see the module docstring). Made by ``pool.batch(...)``, which checks
    everything given before anything is written; used as a context manager."""

    def __init__(
        self,
        pool: Target,
        *,
        on_complete: Any = None,
        on_success: Any = None,
        on_failure: Any = None,
        payload: Mapping[str, Any] | None = None,
        conn: Connection | None = None,
        key: str | None = None,
    ) -> None:
        self.pool = pool
        self._conn_arg = caller_connection(conn) if conn is not None else None
        self.key = check_key(key)
        payload = {} if payload is None else payload
        self.payload_json = dumps(payload, limit=pool.registry.payload_limit, what="batch payload")
        self.names, templates = callback_templates(
            pool.registry,
            {"complete": on_complete, "success": on_success, "failure": on_failure},
            payload,
        )
        self.callbacks_json = json.dumps(templates, separators=(",", ":"))
        self.id: int | None = None
        #: Ids of jobs whose keys were held outside this batch: not members (module docstring).
        self.outside: list[int] = []
        #: Whether ``key`` named a batch that existed (this is that batch).
        self.reopened = False
        #: Members this ``with`` block enqueued (new rows, and existing members named by key).
        self.member_ids: list[int] = []
        self._new_members = 0
        self._finished = False
        self._state = "new"  # new -> open -> closed
        self._conn: Connection | None = None
        self._own: Any = None
        self._transaction: Any = None

    # -- the block -----------------------------------------------------------------------------

    def __enter__(self) -> Batch:
        if self._state != "new":
            raise BatchClosed("a batch is opened once: call pool.batch(...) again")
        if self._conn_arg is not None:
            self._conn = self._conn_arg
            self._transaction = self._conn.begin_nested()  # the caller's transaction decides
        else:
            self._own = self.pool.engine.connect()
            self._conn = self._own
            self._transaction = self._own.begin()
        try:
            self._open()
        except BaseException:
            self._end(commit=False)
            raise
        self._state = "open"
        return self

    def _open(self) -> None:
        assert self._conn is not None
        opened = batches.open_batch(
            self._conn,
            key=self.key,
            on_complete=self.names["complete"],
            on_success=self.names["success"],
            on_failure=self.names["failure"],
            callbacks_json=self.callbacks_json,
            payload_json=self.payload_json,
        )
        self.id, self.reopened, self._finished = opened.id, not opened.created, opened.finished
        if self.reopened and (
            opened.callbacks != json.loads(self.callbacks_json)
            or opened.payload != json.loads(self.payload_json)
        ):
            raise IdempotencyConflict(
                f"batch key {self.key!r} belongs to batch {opened.id} with other callbacks or"
                " payload"
            )

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state != "open":
            return
        if exc_type is not None:
            self._end(commit=False)
            return
        fired: list[int] = []
        try:
            if not self._new_members:  # nothing to wait for: it finishes now
                conn, batch_id = self._usable()
                fired = [
                    job_id
                    for batch in batches.settle(conn, [batch_id], "empty")
                    for job_id in batch.callback_ids
                ]
        except BaseException:
            self._end(commit=False)
            raise
        self._end(commit=True)
        # the members, and the callbacks of an empty batch, through the pool's testing seam
        self.pool._enqueued(self._conn_arg, self.member_ids + fired)

    def _end(self, *, commit: bool) -> None:
        self._state = "closed"
        try:
            if commit:
                self._transaction.commit()
            else:
                self._transaction.rollback()
        finally:
            if self._own is not None:
                self._own.close()
            self._conn = None

    # -- members -------------------------------------------------------------------------------

    def _usable(self) -> tuple[Connection, int]:
        """The batch's connection and id, while its block is open."""
        if self._state == "new":
            raise BatchClosed(
                "use the batch inside its with block: "
                "with pool.batch(...) as batch: batch.enqueue(...)"
            )
        if self._state == "closed" or self._conn is None or self.id is None:
            raise BatchClosed(f"batch {self.id}: its with block is over; it takes no more members")
        return self._conn, self.id

    def enqueue(
        self,
        task: str | Callable[..., Any],
        payload: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> int:
        """Enqueue one member (the options of ``pool.enqueue``, ``conn=`` excepted); returns
        its id (the holder's, when its key is held: see the module docstring)."""
        if "conn" in options:
            raise InvalidJob("batch.enqueue takes no conn=: pass conn= to pool.batch(...)")
        conn, batch_id = self._usable()
        if self._finished:
            return self._existing(conn, batch_id, [(task, payload, options)])[0]
        job_id = enqueue_one_or_linked(self.pool, task, payload, conn, options, batch_id=batch_id)
        self._joined(conn, batch_id, [job_id], [job_id] if options.get("key") is not None else [])
        return job_id

    def enqueue_many(self, jobs: Any) -> list[int]:
        """Enqueue many members at once (the items of ``pool.enqueue_many``); their ids."""
        conn, batch_id = self._usable()
        if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
            raise InvalidJob(
                "enqueue_many takes an iterable of (task, payload) or (task,"
                f" payload, options), got {type(jobs).__name__}"
            )
        items = list(jobs)
        if self._finished:
            return self._existing(conn, batch_id, items)
        if has_links(items):
            ids = enqueue_many_linked(self.pool, items, conn, batch_id=batch_id)
        else:
            ids = enqueue_batch(self.pool, items, conn, batch_id=batch_id)
        keyed = [
            job_id
            for job_id, item in zip(ids, items, strict=True)
            if len(item) == 3 and item[2].get("key") is not None
        ]
        self._joined(conn, batch_id, ids, keyed)
        return ids

    def _joined(self, conn: Connection, batch_id: int, ids: list[int], keyed: list[int]) -> None:
        outside = batches.outside_batch(conn, batch_id, keyed) if keyed else set()
        self.outside += [job_id for job_id in ids if job_id in outside]
        members = [job_id for job_id in ids if job_id not in outside]
        self.member_ids += members
        self._new_members += len(members)

    def _existing(self, conn: Connection, batch_id: int, items: list[Any]) -> list[int]:
        """A finished batch takes no new member; a member it has (by key) answers its id."""
        rows = [
            build_job(self.pool.registry, *item[:2], **(item[2] if len(item) == 3 else {}))
            for item in items
        ]
        found = batches.members_by_key(conn, batch_id, [row.key for row in rows if row.key])
        missing = [row for row in rows if (row.key or "") not in found]
        if missing:
            raise BatchFinished(
                f"batch {batch_id} has finished: it takes no new member"
                f" ({missing[0].task}, key {missing[0].key!r})"
            )
        ids = [found[row.key or ""] for row in rows]
        self.member_ids += ids
        return ids


class AsyncBatch:
    """:class:`Batch` for asyncio (``pool.batch_async(...)``), on the pool's async engine or a
    caller's ``AsyncConnection``: ``async with``, ``await batch.enqueue(...)``. The same rules:
    each step runs the sync batch's code through ``AsyncConnection.run_sync``."""

    def __init__(self, pool: Target, *, conn: Any = None, **options: Any) -> None:
        self.pool = pool
        self._conn_arg = caller_async_connection(conn) if conn is not None else None
        self._options = options
        Batch(pool, **options)  # every argument checked before anything is written
        self._batch: Batch | None = None
        self._aconn: Any = None

    @property
    def id(self) -> int | None:
        return self._batch.id if self._batch is not None else None

    @property
    def outside(self) -> list[int]:
        return self._batch.outside if self._batch is not None else []

    @property
    def reopened(self) -> bool:
        return self._batch.reopened if self._batch is not None else False

    @property
    def member_ids(self) -> list[int]:
        return self._batch.member_ids if self._batch is not None else []

    async def __aenter__(self) -> AsyncBatch:
        if self._batch is not None:
            raise BatchClosed("a batch is opened once: call pool.batch_async(...) again")
        own = self._conn_arg is None
        self._aconn = await self.pool.async_engine.connect() if own else self._conn_arg
        try:
            if own:
                await self._aconn.begin()
            self._batch = Batch(self.pool, conn=self._aconn.sync_connection, **self._options)
            await self._aconn.run_sync(lambda _: self._batch.__enter__())
        except BaseException:
            await self._close(commit=False)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._batch is not None
        try:
            await self._aconn.run_sync(lambda _: self._batch.__exit__(exc_type, exc, tb))
        except BaseException:
            await self._close(commit=False)
            raise
        await self._close(commit=exc_type is None)

    async def _close(self, *, commit: bool) -> None:
        if self._conn_arg is not None or self._aconn is None:
            return  # the caller's transaction decides
        try:
            if commit:
                await self._aconn.commit()
        finally:
            await self._aconn.close()

    async def enqueue(
        self,
        task: str | Callable[..., Any],
        payload: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> int:
        """:meth:`Batch.enqueue`."""
        job_id: int = await self._run(lambda batch: batch.enqueue(task, payload, **options))
        return job_id

    async def enqueue_many(self, jobs: Any) -> list[int]:
        """:meth:`Batch.enqueue_many`."""
        ids: list[int] = await self._run(lambda batch: batch.enqueue_many(jobs))
        return ids

    async def _run(self, step: Callable[[Batch], Any]) -> Any:
        if self._batch is None or self._aconn is None:
            raise BatchClosed(
                "use the batch inside its block: async with pool.batch_async(...) as batch: ..."
            )
        batch = self._batch
        return await self._aconn.run_sync(lambda _: step(batch))


# ---------------------------------------------------------------------------------------------
# reading


def status(pool: Target, batch_id: int) -> BatchStatus:
    """``pool.batch_status``: counts by state; UnknownBatch when there is no such batch (never
    opened, rolled back, or pruned after the retention)."""
    check_id(batch_id, "batch id")
    with pool.engine.connect() as conn:
        return status_on(conn, batch_id)


def status_on(conn: Connection, batch_id: int) -> BatchStatus:
    """:func:`status` on ``conn`` (``pool.batch_status_async`` runs it through ``run_sync``)."""
    check_id(batch_id, "batch id")
    row = batches.read_batch(conn, batch_id)
    if row is None:
        raise UnknownBatch(
            f"no batch {batch_id} (never opened, rolled back, or pruned after the retention)"
        )
    return status_of(row, batches.member_counts(conn, batch_id, row.callback_ids or []))


def results(pool: Target, batch_id: int, page_size: int = PAGE_SIZE) -> Iterator[MemberResult]:
    """``pool.batch_results``: every member, ``done`` ones first (then dead, cancelled and the
    live ones), by id within each state, read a keyset page at a time: the whole batch is never
    in memory. Checks the id and that the batch exists now; the pages are read as you iterate."""
    check_id(batch_id, "batch id")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidJob(f"page_size must be a positive int, got {page_size!r}")
    with pool.engine.connect() as conn:
        row = batches.read_batch(conn, batch_id)
    if row is None:
        raise UnknownBatch(
            f"no batch {batch_id} (never opened, rolled back, or pruned after the retention)"
        )
    return _pages(pool, batch_id, list(row.callback_ids or []), page_size)


async def results_async(
    pool: Target, batch_id: int, page_size: int = PAGE_SIZE
) -> AsyncIterator[MemberResult]:
    """:func:`results` on the pool's async engine: the same order and pages."""
    check_id(batch_id, "batch id")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidJob(f"page_size must be a positive int, got {page_size!r}")
    async with pool.async_engine.connect() as conn:
        row = await conn.run_sync(batches.read_batch, batch_id)
    if row is None:
        raise UnknownBatch(
            f"no batch {batch_id} (never opened, rolled back, or pruned after the retention)"
        )
    callbacks = list(row.callback_ids or [])
    for state in RESULT_ORDER:
        after = 0
        while True:
            async with pool.async_engine.connect() as conn:
                page = await conn.run_sync(
                    batches.member_page, batch_id, state, after, page_size, callbacks
                )
            for member in page:
                yield MemberResult(member.id, member.state, member.result, member.key)
            if len(page) < page_size:
                break
            after = page[-1].id


def _pages(pool: Target, batch_id: int, callbacks: list[int], size: int) -> Iterator[MemberResult]:
    for state in RESULT_ORDER:
        after = 0
        while True:
            with pool.engine.connect() as conn:
                page = batches.member_page(conn, batch_id, state, after, size, callbacks)
            for member in page:
                yield MemberResult(member.id, member.state, member.result, member.key)
            if len(page) < size:
                break
            after = page[-1].id


__all__ = [
    "Batch",
    "BatchStatus",
    "MemberResult",
    "results",
    "results_async",
    "status",
    "status_on",
]
