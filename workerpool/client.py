"""WorkerPool: the registry of an application's queues, tasks and cron jobs, and its way in.

The specs and their checks live in :mod:`workerpool.specs` and :mod:`workerpool.validation`;
writing jobs lives in :mod:`workerpool.enqueue`, the engines in :mod:`workerpool.engines`.
Their names used by other modules stay importable from here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from . import sql
from .model.backoff import Backoff
from .model.errors import ConfigError, UnknownQueue, UnknownTask
from .model.limits import check_task_limits
from .model.payload import DEFAULT_PAYLOAD_LIMIT
from .model.specs import CronSpec, Hooks, MaintenanceSpec, QueueSpec, TaskSpec
from .model.validation import (
    check_cron_task_options,
    check_max_attempts,
    check_name,
    check_positive,
    check_priority,
    check_version,
)
from .sql import db
from .sql.schema import PAYLOAD_HARD_LIMIT
from .sql.writes import (
    INSERT_CHUNK,
    build_job,
    enqueue_batch,
    enqueue_batch_async,
    enqueue_one,
    enqueue_one_async,
)

__all__ = [
    "INSERT_CHUNK",
    "CronSpec",
    "Hooks",
    "MaintenanceSpec",
    "QueueSpec",
    "TaskSpec",
    "WorkerPool",
    "check_name",
    "validate_crons",
]

STALE_ENV = "WORKER_CLAIM_STALE_MS"
T = TypeVar("T")


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
        return self._once("_url", lambda: db.resolve_url(self._url_arg))

    @property
    def engine(self) -> Engine:
        return self._once("_engine", lambda: db.create(self.url))

    @property
    def async_engine(self) -> Any:
        return self._once("_async_engine", lambda: db.create_async(self.url))

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


class WorkerPool:
    """Queues, tasks and cron jobs of one application, and the way to enqueue into them.

    ``url``: a PostgreSQL URL; else ``$WORKERPOOL_DATABASE_URL``; else the embedded PostgreSQL.
    Nothing connects until the first database call.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        notify: bool = True,
    ) -> None:
        if not 0 < payload_limit <= PAYLOAD_HARD_LIMIT:
            raise ConfigError(f"payload_limit must be within 1..{PAYLOAD_HARD_LIMIT}")
        self.engines = Engines(url)  # nothing connects until the first database call
        self._inline: Callable[[Any, list[int]], None] | None = None  # testing_mode("inline")
        self.payload_limit = payload_limit
        self.notify = notify
        self.queues: dict[str, QueueSpec] = {}
        self.tasks: dict[str, TaskSpec] = {}
        self.crons: dict[str, CronSpec] = {}
        self.on_dead: Hooks = Hooks()  # pool.on_dead(fn): fn(notice) for every job that goes dead
        self.on_cancel: Hooks = Hooks("on_cancel")  # fn(notice) for every job cancelled
        self.maintenance_settings = MaintenanceSpec()

    # -- configuration -------------------------------------------------------------------------

    def queue(self, name: str, **settings: Any) -> QueueSpec:
        """Declare (or re-declare) a worker type and its settings."""
        spec = QueueSpec(name=name, **settings)
        self.queues[name] = spec
        return spec

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        queue: str = "default",
        name: str | None = None,
        max_attempts: int = 5,
        timeout: float | None = None,
        version: int = 1,
        backoff: Backoff | None = None,
        priority: int = 0,
        upcasters: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: Callable[[Mapping[str, Any]], str] | None = None,
        key_rate_limit: str | None = None,
    ) -> Callable[..., Any]:
        """Register a handler. Usable as ``@pool.task`` or ``@pool.task(queue=..., ...)``.

        ``concurrency_limit`` and ``key_rate_limit`` hold per concurrency key, cluster-wide
        (docs/limits.md); ``concurrency_key`` computes a job's key from its payload.
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            task_name = check_name("task", name or func.__name__)
            check_task_limits(task_name, concurrency_limit, concurrency_key, key_rate_limit)
            spec = TaskSpec(
                name=task_name,
                queue=check_name("queue", queue),
                fn=func,
                max_attempts=check_max_attempts(max_attempts),
                timeout=check_positive("timeout", timeout, allow_none=True),
                version=check_version(version),
                backoff=backoff or Backoff(),
                priority=check_priority(priority),
                upcasters=dict(upcasters or {}),
                concurrency_limit=concurrency_limit,
                concurrency_key=concurrency_key,
                key_rate_limit=key_rate_limit,
            )
            self._check_new_task(spec)
            self._add_task(spec)
            if queue not in self.queues:
                self.queue(queue)
            return func

        return register(fn) if fn is not None else register

    def _check_new_task(self, spec: TaskSpec) -> None:
        if spec.name in self.tasks and self.tasks[spec.name].fn is not spec.fn:
            raise ConfigError(f"task {spec.name!r} is registered twice")

    def _add_task(self, spec: TaskSpec) -> None:
        self.tasks[spec.name] = spec
        spec.fn.__workerpool_task__ = spec.name  # type: ignore[attr-defined]

    def cron(
        self,
        expression: str,
        *,
        queue: str | None = None,
        name: str | None = None,
        overlap: str = "skip",
        missed: str = "run_once",
        timezone: str = "UTC",
        **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Run the decorated function on a schedule: ``@pool.cron("0 * * * *", queue="ops")``.

        The function becomes a task (named after it unless ``name=``; ``task_options`` are those of
        :meth:`task`) and a cron job. Bad expression, timezone or policy, or a duplicate name,
        raise ConfigError here; an undeclared queue is refused at start (:func:`validate_crons`).
        """
        if callable(expression):
            raise ConfigError("use @pool.cron(expression, queue=...), not bare @pool.cron")
        if queue is None:
            raise ConfigError(f"cron {expression!r}: queue= is required (the worker type)")

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            cron_name = check_name("cron", name or func.__name__)
            spec = CronSpec(cron_name, expression, queue, overlap, missed, timezone)
            if cron_name in self.crons:
                raise ConfigError(f"cron {cron_name!r} is declared twice")
            if cron_name in self.tasks:
                raise ConfigError(f"cron {cron_name!r}: a task of that name exists; pass name=")
            options = check_cron_task_options(cron_name, task_options)
            task = TaskSpec(name=cron_name, queue=queue, fn=func, **options)
            self._add_task(task)  # its queue is not declared here: validate_crons checks it
            self.crons[cron_name] = spec
            return func

        return register

    def maintenance(self, **settings: Any) -> MaintenanceSpec:
        """Set what the maintenance child does: ``retention`` (seconds or timedelta), etc."""
        if isinstance(settings.get("retention"), timedelta):
            settings["retention"] = settings["retention"].total_seconds()
        self.maintenance_settings = MaintenanceSpec(**settings)
        return self.maintenance_settings

    def validate_crons(self) -> None:
        validate_crons(self)

    def task_spec(self, task: str | Callable[..., Any]) -> TaskSpec:
        name = getattr(task, "__workerpool_task__", task)
        if not isinstance(name, str) or name not in self.tasks:
            raise UnknownTask(f"unknown task {name!r}; registered: {sorted(self.tasks)}")
        return self.tasks[name]

    def queue_spec(self, name: str) -> QueueSpec:
        if name not in self.queues:
            raise UnknownQueue(f"unknown queue {name!r}; declared: {sorted(self.queues)}")
        return self.queues[name]

    def stale_after(self, queue: str) -> float:
        """Seconds before a lease is stale: ``$WORKER_CLAIM_STALE_MS`` if set, else the queue's."""
        raw = os.environ.get(STALE_ENV)
        if raw is None or raw == "":
            return self.queue_spec(queue).stale_after
        try:
            value = float(raw) / 1000
        except ValueError:
            raise ConfigError(f"{STALE_ENV} must be milliseconds, got {raw!r}") from None
        return float(check_positive(STALE_ENV, value, minimum=0))

    def task_versions(self, queue: str) -> dict[str, int]:
        """What a worker of ``queue`` can run: task name → newest payload version it knows."""
        return {t.name: t.version for t in self.tasks.values() if t.queue == queue}

    # -- database ------------------------------------------------------------------------------

    @property
    def url(self) -> URL:
        return self.engines.url

    @property
    def engine(self) -> Engine:
        return self.engines.engine

    @property
    def async_engine(self) -> Any:
        """The pool's own ``AsyncEngine`` (psycopg async), created on first use by
        :meth:`enqueue_async` without ``conn=``; closed by :meth:`dispose_async`."""
        return self.engines.async_engine

    def use_engine(self, engine: Engine) -> None:
        """Replace the engine (a forked child builds its own)."""
        self.engines.use_engine(engine)

    def forget_engine(self) -> None:
        """Drop the engine inherited over a fork without touching its connections."""
        self.engines.forget_engine()

    def dispose(self) -> None:
        """Close the pool's connections. An async engine, if one was made, is closed too when
        no event loop runs in this thread; inside one, ``await pool.dispose_async()``."""
        self.engines.dispose()

    async def dispose_async(self) -> None:
        """Close the pool's async engine (and the sync one) from inside an event loop."""
        await self.engines.dispose_async()

    def migrate(self, revision: str = "head") -> None:
        from .migrate import upgrade

        upgrade(self.url, revision)

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
    ) -> sql.NewJob:
        """Validate one job. Raises a named error for any bad input; touches no database.

        ``limits``: ``concurrency_key``, ``unique``, ``unique_for``, ``on_conflict``
        (docs/limits.md)."""
        return build_job(self, task, payload, key=key, run_at=run_at, delay=delay,
                         priority=priority, max_attempts=max_attempts, **limits)

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
        """
        job_id = enqueue_one(self, task, payload, conn, options)
        if self._inline is not None:
            self._inline(conn, [job_id])
        return job_id

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
        written. A batch without keys is one ``COPY``, which the database inserts while the
        next rows are checked. A batch with keys is one INSERT of up to :data:`INSERT_CHUNK`
        jobs, or chunks of that size pipelined in one transaction (in the caller's, a
        savepoint). A caller's connection on another driver than psycopg 3 (psycopg2, say) gets
        the whole batch in one INSERT.
        """
        ids = enqueue_batch(self, jobs, conn)
        if self._inline is not None:
            self._inline(conn, ids)
        return ids

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
        job_id = await enqueue_one_async(self, task, payload, conn, options)
        if self._inline is not None:
            self._inline(conn, [job_id])
        return job_id

    async def enqueue_many_async(self, jobs: Iterable[Any], *, conn: Any = None) -> list[int]:
        """:meth:`enqueue_many` for asyncio (``conn=`` an ``AsyncConnection``): the batch is
        checked whole, then written atomically in one statement with one NOTIFY."""
        ids = await enqueue_batch_async(self, jobs, conn)
        if self._inline is not None:
            self._inline(conn, ids)
        return ids

    def testing_mode(self, mode: str | None) -> AbstractContextManager[WorkerPool]:
        """For tests: ``"inline"`` runs each enqueued job in this process right after the
        enqueuing transaction commits (at once without ``conn=``); ``None`` turns it off. The
        mode applies at once; used as a context manager, the previous mode returns on exit."""
        from .testing.inline import set_mode

        return set_mode(self, mode)

    # -- operating it live ---------------------------------------------------------------------

    def cancel(
        self,
        ids: Iterable[int] | None = None,
        *,
        conn: Connection | None = None,
        reason: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        state: str | None = None,
        dry_run: bool = False,
        by: str | None = None,
    ) -> Any:
        """Cancel jobs by id (or a queue's, with optional ``task``/``state``): a queued job ends
        ``cancelled`` now, a running one is asked to stop. Returns a ``CancelResult`` saying per
        id what happened; an unknown id raises UnknownJob and changes nothing."""
        from .ops.cancel import Selection, cancel

        selection = Selection(tuple(ids) if ids is not None else None, queue, task, state)
        return cancel(self, selection, conn=conn, reason=reason, by=by, dry_run=dry_run)

    def pause(self, queue: str, *, by: str | None = None,
              known: Iterable[str] | None = None) -> None:
        """Stop every replica claiming from ``queue`` (running jobs finish; enqueue works)."""
        from .ops.pausing import set_paused

        set_paused(self, queue, True, by=by, known=known)

    def resume(self, queue: str, *, by: str | None = None,
               known: Iterable[str] | None = None) -> None:
        """Let every replica claim from ``queue`` again."""
        from .ops.pausing import set_paused

        set_paused(self, queue, False, by=by, known=known)


def validate_crons(pool: WorkerPool) -> None:
    """Refuse at start a cron whose queue no worker type serves (one clear ConfigError)."""
    for spec in pool.crons.values():
        if spec.queue not in pool.queues:
            raise ConfigError(
                f"cron {spec.name!r}: queue {spec.queue!r} is not declared "
                f"(declared: {sorted(pool.queues)}); add pool.queue({spec.queue!r})"
            )
