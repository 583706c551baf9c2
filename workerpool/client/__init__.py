"""The client: ``WorkerPool``, an application's registry, its engines, and the calls it makes.

A ``WorkerPool`` is a :class:`~workerpool.model.registry.Registry` (queues, tasks, crons,
hooks: what ``workerpool run`` hands its children), its engines (:mod:`.engines`, made on
first use),
and the calls an application makes: enqueue (checked by :mod:`workerpool.model.new_job`,
written by :mod:`workerpool.client.enqueue`), results (:mod:`workerpool.client.results`), batches
(:mod:`workerpool.client.batches`), and cancel, pause, resume, cron changes, reruns and
signals (:mod:`workerpool.client.operating`). Nothing below this module imports it: the runtime
gets the registry and a URL, never the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from ..model.batch import PAGE_SIZE, BatchStatus, MemberResult
from ..model.doors import bounds, task_rows
from ..model.errors import ConfigError
from ..model.job import Job
from ..model.new_job import NewJob, build_job
from ..model.payload import DEFAULT_PAYLOAD_LIMIT
from ..model.registry import Registry
from ..model.results import JobInfo
from ..model.specs import CronSpec, Hooks, QueueSpec, TaskSpec
from ..model.validation import DEFAULT_SCHEMA
from ..sql import doors
from ..sql.search_path import borrowed, borrowed_async
from . import batches, results
from .acting import actor
from .asynchronous import AsyncCalls
from .batches import AsyncBatch, Batch
from .engines import Engines, database_url, default_actor
from .enqueue import (
    caller_async_connection,
    enqueue_batch,
    enqueue_batch_async,
    enqueue_one,
    enqueue_one_async,
)
from .explained import explained, explaining
from .operating import OperatorCalls
from .tasks import AsyncTask, BaseTask, Task, TaskDecorator, wrap
from .workflows import (
    Workflow,
    chain,
    enqueue_linked,
    enqueue_many_linked,
    has_links,
    is_linked,
)

__all__ = ["Engines", "WorkerPool", "actor", "database_url", "default_actor", "explaining"]


def _not_testing(conn: Any, ids: list[int]) -> None:
    """The testing seam outside testing mode: the jobs wait for a worker."""


T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class WorkerPool(AsyncCalls, OperatorCalls):
    """An application's way in: its declarations (:attr:`registry`), its database, and the
    calls it makes (enqueue, result, batch, cancel, pause, resume).

    ``url``: a PostgreSQL URL; else ``$WORKERPOOL_DATABASE_URL``; else the embedded PostgreSQL.
    Nothing connects until the first database call. ``schema``: the schema of every workerpool
    table (else ``$WORKERPOOL_SCHEMA``, else ``public``); InvalidSchema unless it is a plain
    lower-case identifier. ``read_url``: a replica that status, the dashboard and the depth
    samples read (else ``$WORKERPOOL_READ_URL``, else the primary); writes never go there.
    ``payload_limit`` and ``notify``: see :class:`~workerpool.model.registry.Registry`.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        schema: str | None = None,
        read_url: str | URL | None = None,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        notify: bool = True,
    ) -> None:
        #: The declarations: what ``workerpool run`` hands its children, without the engines.
        self.registry = Registry(payload_limit=payload_limit, notify=notify)
        self.engines = Engines(url, schema, read_url)  # nothing connects before the first call
        #: The testing seam, chosen once by :meth:`testing_mode`: every path that writes jobs or
        #: makes them due hands it the caller's connection (or None) and their ids once its
        #: write is done. Outside testing mode it does nothing; in inline mode it runs them.
        self._enqueued: Callable[[Any, list[int]], None] = _not_testing
        # Declaring is the registry's: its own methods, so every signature and check is one.
        # These, the hooks and the three views below stay on the pool because an application
        # calls them (``@pool.task``, ``pool.tasks`` in its tests); the rest of the registry
        # (specs, versions, limits, settings) is the runtime's, read as ``pool.registry``.
        self.queue = self.registry.queue
        self.cron = self.registry.cron
        self.maintenance = self.registry.maintenance

    # -- the declarations ----------------------------------------------------------------------

    @overload
    def task(
        self, fn: Callable[Concatenate[Job, P], Coroutine[Any, Any, R]], /, **options: Any
    ) -> AsyncTask[P, R]: ...

    @overload
    def task(self, fn: Callable[Concatenate[Job, P], R], /, **options: Any) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, **options: Any) -> TaskDecorator: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Declare a handler: ``@pool.task`` or ``@pool.task(queue=..., ...)`` (the options of
        :meth:`Registry.task <workerpool.model.registry.Registry.task>`). Returns a
        :class:`~workerpool.client.tasks.Task` (an ``AsyncTask`` for an ``async def``):
        calling it calls the function; ``.enqueue(...)`` takes the handler's parameters after
        the ``Job`` and returns a ``JobHandle`` (docs/typed-tasks.md)."""

        def declare(func: Callable[..., Any]) -> BaseTask[Any, Any]:
            func = getattr(func, "__wrapped__", func) if isinstance(func, BaseTask) else func
            self.registry.task(func, **options)
            return wrap(self, self.registry.task_spec(func))

        return declare(fn) if fn is not None else declare

    @property
    def queues(self) -> dict[str, QueueSpec]:
        return self.registry.queues

    @property
    def tasks(self) -> dict[str, TaskSpec]:
        return self.registry.tasks

    @property
    def crons(self) -> dict[str, CronSpec]:
        return self.registry.crons

    @property
    def on_dead(self) -> Hooks:
        """``@pool.on_dead``: ``fn(notice)`` for every job that goes dead."""
        return self.registry.on_dead

    @property
    def on_cancel(self) -> Hooks:
        """``@pool.on_cancel``: ``fn(notice)`` for every job cancelled."""
        return self.registry.on_cancel

    # -- database ------------------------------------------------------------------------------
    # The engine is what a caller opens its transaction on for ``conn=``; the URL and schema
    # what its own Alembic and psql need. The rest of the engines is ``pool.engines``.

    @property
    def url(self) -> URL:
        return self.engines.url

    @property
    def engine(self) -> Engine:
        return self.engines.engine

    @property
    def schema(self) -> str:
        return self.engines.schema

    @property
    def read_engine(self) -> Engine:
        """Where status, the dashboard and the depth samples read: the replica of ``read_url``
        if one is set, else :attr:`engine`. Never used to write."""
        return self.engines.read_engine

    @property
    def async_engine(self) -> Any:
        """The pool's own ``AsyncEngine`` (psycopg async), created on first use by
        :meth:`enqueue_async` without ``conn=``; closed by :meth:`dispose_async`."""
        return self.engines.async_engine

    def dispose(self) -> None:
        """Close the pool's connections and its results listener. An async engine, if one was
        made, is closed too when no event loop runs in this thread; inside one, ``await
        pool.dispose_async()``."""
        results.stop_listener(self)
        self.engines.dispose()

    async def dispose_async(self) -> None:
        """Close the pool's async engine (and the sync one) from inside an event loop."""
        results.stop_listener(self)
        await self.engines.dispose_async()

    def migrate(self, revision: str = "head") -> None:
        from ..migrate import upgrade

        upgrade(self.url, revision, schema=self.schema)

    def check_migrated(self) -> None:
        """NotMigrated (one line naming ``workerpool migrate`` and the revisions) unless the
        database holds this code's tables: what `workerpool run` and `web` check at start."""
        from ..migrate import check

        check(self.engine, self.schema)

    def not_migrated(self, exc: BaseException) -> Exception:
        """The NotMigrated error for ``exc``, a statement's UndefinedTable or UndefinedColumn."""
        from ..migrate import explain

        return explain(self.engine, self.schema, exc)

    # -- enqueue -------------------------------------------------------------------------------

    def build(
        self,
        task: str | Callable[..., Any],
        payload: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        **limits: Any,
    ) -> NewJob:
        """Validate one job. Raises a named error for any bad input; touches no database.

        ``limits``: ``concurrency_key``, ``unique``, ``unique_for``, ``on_conflict``
        (docs/limits.md)."""
        return build_job(
            self.registry,
            task,
            payload,
            key=key,
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            **limits,
        )

    @explained
    def enqueue(
        self,
        task: str | Callable[..., Any],
        payload: Mapping[str, Any] | None = None,
        *,
        conn: Connection | None = None,
        **options: Any,
    ) -> int:
        """Enqueue one job and return its id.

        With ``conn=`` the row is written in the caller's transaction: the job exists if and only
        if that transaction commits. A ``key`` already taken returns the existing job's id
        (``unique=``, ``unique_for=`` and ``on_conflict=`` say how long it is held and what a
        second enqueue does; ``concurrency_key=`` groups jobs for per-key limits: docs/limits.md).
        ``after=[ids]`` (job ids or a typed task's handles): the job waits until every one of
        them is done; ``sequence="name"``: it runs after every earlier job of that sequence, one
        at a time (docs/workflows.md).
        """
        with borrowed(conn, self.schema):
            if is_linked(options):
                job_id = enqueue_linked(self, task, payload, conn, options)
            else:
                job_id = enqueue_one(self, task, payload, conn, options)
        self._enqueued(conn, [job_id])
        return job_id

    def register_tasks(self, *, conn: Connection | None = None) -> int:
        """Write every task, and each bound the code declares (``max_pending``), where the doors
        in read them (``workerpool_tasks``, ``workerpool_queue_bounds``): what ``workerpool
        run`` does at start, for a database that SQL or HTTP producers use before any worker
        ran. Returns the number of tasks written (docs/doors.md)."""
        rows = task_rows(self.registry)
        with borrowed(conn, self.schema):
            if conn is not None:
                doors.publish(conn, rows, bounds(self.registry), actor(None))
            else:
                with self.engine.begin() as own:
                    doors.publish(own, rows, bounds(self.registry), actor(None))
        return len(rows)

    @explained
    def enqueue_many(
        self,
        jobs: Iterable[tuple[str | Callable[..., Any], Mapping[str, Any] | None, Mapping[str, Any]]]
        | Iterable[tuple[str | Callable[..., Any], Mapping[str, Any] | None]],
        *,
        conn: Connection | None = None,
    ) -> list[int]:
        """Enqueue many jobs atomically, with one NOTIFY; ids in the order given.

        Each item is ``(task, payload)`` or ``(task, payload, options)`` where options are the
        keyword arguments of :meth:`enqueue`. A bad item raises and nothing of the batch is
        written. A batch without keys is one ``COPY``. A batch with keys is an INSERT in chunks
        of :data:`INSERT_CHUNK` jobs pipelined in one transaction (in the caller's, a
        savepoint); a caller's connection on another driver than psycopg 3 (psycopg2, say)
        sends the same chunks one after another.
        """
        items = jobs if isinstance(jobs, list) else None
        if (
            items is None
            and not isinstance(jobs, str | bytes | Mapping)
            and isinstance(jobs, Iterable)
        ):
            items = list(jobs)
        with borrowed(conn, self.schema):
            if items is not None and has_links(items):
                ids = enqueue_many_linked(self, items, conn)
            else:
                ids = enqueue_batch(self, items if items is not None else jobs, conn)
        self._enqueued(conn, ids)
        return ids

    @explained
    async def enqueue_async(
        self,
        task: str | Callable[..., Any],
        payload: Mapping[str, Any] | None = None,
        *,
        conn: Any = None,
        **options: Any,
    ) -> int:
        """:meth:`enqueue` for asyncio: ``conn=`` is a SQLAlchemy ``AsyncConnection`` and the job
        exists if and only if its transaction commits. Same checks, errors and NOTIFY; without
        ``conn=`` the pool's own async engine writes it (:attr:`async_engine`)."""
        async with borrowed_async(conn, self.schema):
            if is_linked(options):
                job_id = await self._linked_async(
                    conn, lambda sync: enqueue_linked(self, task, payload, sync, options)
                )
            else:
                job_id = await enqueue_one_async(self, task, payload, conn, options)
        self._enqueued(conn, [job_id])
        return job_id

    @explained
    async def enqueue_many_async(self, jobs: Iterable[Any], *, conn: Any = None) -> list[int]:
        """:meth:`enqueue_many` for asyncio (``conn=`` an ``AsyncConnection``): the batch is
        checked whole, then written atomically in one statement with one NOTIFY."""
        items = (
            list(jobs)
            if not isinstance(jobs, str | bytes | Mapping) and isinstance(jobs, Iterable)
            else jobs
        )
        async with borrowed_async(conn, self.schema):
            if isinstance(items, list) and has_links(items):
                ids = await self._linked_async(
                    conn, lambda sync: enqueue_many_linked(self, items, sync)
                )
            else:
                ids = await enqueue_batch_async(self, items, conn)
        self._enqueued(conn, ids)
        return ids

    async def _linked_async(self, conn: Any, write: Callable[[Connection], T]) -> T:
        """A linked enqueue on an ``AsyncConnection`` (the caller's transaction) or the pool's
        async engine: the same statements, through ``run_sync``."""
        result: T
        if conn is not None:
            result = await caller_async_connection(conn).run_sync(write)
            return result
        async with self.async_engine.begin() as own:
            result = await own.run_sync(write)
        return result

    @explained
    def chain(
        self, steps: Iterable[Any], *, conn: Connection | None = None, key: str | None = None
    ) -> list[int]:
        """Enqueue ``steps`` (``(task, payload)`` or ``(task, payload, options)``) each after
        the previous one, in one transaction (``conn=``: the caller's); returns their ids. The
        first one's id is the chain's ``workflow_id``.

        ``key`` (or ``key=`` in the first step's options) makes the chain idempotent: its first
        job holds the key, and a chain whose first job holds it already is returned as it is
        (every one of its ids; nothing written), checked as :meth:`enqueue` checks a key. Key
        options on a later step are refused (docs/workflows.md)."""
        with borrowed(conn, self.schema):
            ids = chain(self, steps, conn, key)
        self._enqueued(conn, ids)
        return ids

    def workflow(self, *, conn: Connection | None = None, key: str | None = None) -> Workflow:
        """A graph builder: ``wf.step(name, task, payload, after=[names])`` then ``wf.run()``
        enqueues every step in one transaction and returns ``{name: job id}``. ``key``: a run
        whose key a workflow's first job holds already returns that workflow's ids."""
        self._own_schema_only(conn, "workflow")
        return Workflow(self, conn, key)

    def testing_mode(self, mode: str | None) -> AbstractContextManager[WorkerPool]:
        """For tests: ``"inline"`` runs each enqueued job in this process right after the
        enqueuing transaction commits (at once without ``conn=``); ``None`` turns it off. The
        mode applies at once; used as a context manager, the previous mode returns on exit."""
        from ..runtime.inline import MODES, InlineRunner

        if mode not in MODES:
            raise ConfigError(f"testing mode must be one of {MODES}, got {mode!r}")
        previous = self._enqueued
        self._enqueued = InlineRunner(self.registry, lambda: self.engine) if mode else _not_testing
        return self._restore_mode(previous)

    @contextmanager
    def _restore_mode(self, previous: Callable[[Any, list[int]], None]) -> Iterator[WorkerPool]:
        try:
            yield self
        finally:
            self._enqueued = previous

    # -- results and batches (workerpool.client.results, workerpool.client.batches) ------------

    @explained
    def job(self, job_id: int) -> JobInfo:
        """A ``JobInfo`` of the job now (state, result, attempts, errors...); never waits.
        UnknownJob when no job has this id (never enqueued, or pruned)."""
        return results.read(self, job_id)

    @explained
    def result(self, job_id: int, timeout: float | None = None) -> Any:
        """Wait for the job to end and return what its handler returned. Raises JobFailed
        (dead: ``.reason``, ``.errors``), JobCancelled, ResultTimeout (a TimeoutError: not
        finished within ``timeout`` seconds; None waits as long as it takes) or UnknownJob."""
        return results.wait(self, job_id, timeout, listen=self._listens())

    @explained
    async def result_async(self, job_id: int, timeout: float | None = None) -> Any:
        """:meth:`result` for asyncio, on the pool's async engine."""
        return await results.wait_async(self, job_id, timeout, listen=self._listens())

    def _listens(self) -> bool:
        """Whether a wait can LISTEN: ``notify`` on, and not behind PgBouncer's transaction
        pooling (``$WORKERPOOL_PGBOUNCER``), where a session's LISTEN is not its own."""
        return self.registry.notify and not self.engines.pooled

    def batch(
        self,
        *,
        on_complete: Any = None,
        on_success: Any = None,
        on_failure: Any = None,
        payload: Mapping[str, Any] | None = None,
        conn: Connection | None = None,
        key: str | None = None,
    ) -> Batch:
        """A batch to fill in a ``with`` block: ``batch.enqueue(...)`` adds members, all
        written in one transaction (``conn=``: the caller's). When the last member ends, its
        outcome's transaction enqueues the callbacks once (``on_complete`` always,
        ``on_success`` if every member is done, ``on_failure`` if any is dead or cancelled) with
        ``payload``. ``key=`` reopens the batch of that key (a coordinator run twice)."""
        self._own_schema_only(conn, "batch")
        return Batch(
            self,
            on_complete=on_complete,
            on_success=on_success,
            on_failure=on_failure,
            payload=payload,
            conn=conn,
            key=key,
        )

    def batch_async(
        self,
        *,
        on_complete: Any = None,
        on_success: Any = None,
        on_failure: Any = None,
        payload: Mapping[str, Any] | None = None,
        conn: Any = None,
        key: str | None = None,
    ) -> AsyncBatch:
        """:meth:`batch` for asyncio: ``async with pool.batch_async(...) as batch: await
        batch.enqueue(...)``, on the pool's async engine or an ``AsyncConnection`` (``conn=``,
        the caller's transaction)."""
        self._own_schema_only(conn, "batch_async")
        return AsyncBatch(
            self,
            on_complete=on_complete,
            on_success=on_success,
            on_failure=on_failure,
            payload=payload,
            conn=conn,
            key=key,
        )

    @explained
    def batch_status(self, batch_id: int) -> BatchStatus:
        """A ``BatchStatus``: members by state, finished, finished_at, the callbacks' ids."""
        return batches.status(self, batch_id)

    def batch_results(self, batch_id: int, *, page_size: int = PAGE_SIZE) -> Iterator[MemberResult]:
        """Every member's ``MemberResult`` (done ones first), read a page at a time."""
        return batches.results(self, batch_id, page_size)

    def _own_schema_only(self, conn: Any, call: str) -> None:
        """Refuse ``conn=`` where a call keeps the caller's connection beyond itself (a batch, a
        workflow) in a schema of its own: the connection would resolve workerpool's tables in
        the caller's search_path, which may hold another pool's."""
        if conn is not None and self.schema != DEFAULT_SCHEMA:
            raise ConfigError(
                f"pool.{call}(conn=...) is not supported in schema {self.schema!r}:"
                " give no conn= (the pool's own transaction)"
            )

    @contextmanager
    def _connection(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            with borrowed(conn, self.schema):
                yield conn
            return
        with self.engine.begin() as own:
            yield own
