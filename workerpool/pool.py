"""WorkerPool: the registry of queues, tasks and cron jobs, and the enqueue API."""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from . import db, queries
from .backoff import Backoff
from .errors import ConfigError, InvalidJob, UnknownQueue, UnknownTask
from .payload import DEFAULT_PAYLOAD_LIMIT, check_key, dumps
from .schema import PAYLOAD_HARD_LIMIT

log = logging.getLogger("workerpool")

MAX_ATTEMPTS_CAP = 1000
STALE_ENV = "WORKER_CLAIM_STALE_MS"
PRIORITY_RANGE = (-32768, 32767)
NAME_PATTERN = "letters, digits, '_', '-', '.' and ':' (1 to 100 characters)"


def check_name(kind: str, name: Any) -> str:
    ok = isinstance(name, str) and 0 < len(name) <= 100
    if ok and all(ch.isalnum() or ch in "_-.:" for ch in name) and name.isascii():
        return name
    raise ConfigError(f"{kind} name {name!r} is invalid: use {NAME_PATTERN}")


def _positive(name: str, value: Any, *, minimum: float = 0.0, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if value <= minimum:
        raise ConfigError(f"{name} must be greater than {minimum:g}, got {value!r}")
    return value


@dataclass(frozen=True)
class QueueSpec:
    """One worker type: the supervisor forks one child process per queue."""

    name: str
    concurrency: int = 10
    stale_after: float = 300.0
    drain_timeout: float = 30.0
    hang_timeout: float = 60.0
    poll_interval: float = 1.0
    notify: bool = True

    def __post_init__(self) -> None:
        check_name("queue", self.name)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise ConfigError(f"queue {self.name}: concurrency must be an int")
        if not 1 <= self.concurrency <= 1000:
            raise ConfigError(f"queue {self.name}: concurrency must be within 1..1000")
        _positive(f"queue {self.name}: stale_after", self.stale_after, minimum=0)
        _positive(f"queue {self.name}: drain_timeout", self.drain_timeout, minimum=-1)
        _positive(f"queue {self.name}: hang_timeout", self.hang_timeout, minimum=0)
        _positive(f"queue {self.name}: poll_interval", self.poll_interval, minimum=0)


@dataclass(frozen=True)
class TaskSpec:
    """A handler and its retry policy."""

    name: str
    queue: str
    fn: Callable[..., Any]
    max_attempts: int = 5
    timeout: float | None = None
    version: int = 1
    backoff: Backoff = field(default_factory=Backoff)
    priority: int = 0
    upcasters: Mapping[int, Callable[[dict], dict]] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def upcast(self, payload: dict, version: int) -> dict:
        """Turn a payload written at ``version`` into the current shape, one step at a time."""
        while version < self.version:
            step = self.upcasters.get(version)
            if step is not None:
                payload = step(payload)
            version += 1
        return payload


@dataclass(frozen=True)
class CronSpec:
    """A recurring job: each tick of ``expression`` becomes at most one job row."""

    name: str
    expression: str
    queue: str
    overlap: str = "skip"
    missed: str = "run_once"
    timezone: str = "UTC"


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
        self._url_arg = url
        self._url: URL | None = None
        self._engine: Engine | None = None
        self.payload_limit = payload_limit
        self.notify = notify
        self.queues: dict[str, QueueSpec] = {}
        self.tasks: dict[str, TaskSpec] = {}
        self.crons: dict[str, CronSpec] = {}
        self.on_dead: list[Callable[..., Any]] = []

    # -- configuration -------------------------------------------------------------------------

    def queue(self, name: str, **settings: Any) -> QueueSpec:
        """Declare (or re-declare) a worker type and its settings."""
        spec = QueueSpec(name=name, **settings)
        self.queues[name] = spec
        return spec

    def task(
        self,
        fn: Callable | None = None,
        *,
        queue: str = "default",
        name: str | None = None,
        max_attempts: int = 5,
        timeout: float | None = None,
        version: int = 1,
        backoff: Backoff | None = None,
        priority: int = 0,
        upcasters: Mapping[int, Callable[[dict], dict]] | None = None,
    ) -> Callable:
        """Register a handler. Usable as ``@pool.task`` or ``@pool.task(queue=..., ...)``."""

        def register(func: Callable) -> Callable:
            spec = TaskSpec(
                name=check_name("task", name or func.__name__),
                queue=check_name("queue", queue),
                fn=func,
                max_attempts=check_max_attempts(max_attempts),
                timeout=_positive("timeout", timeout, allow_none=True),
                version=check_version(version),
                backoff=backoff or Backoff(),
                priority=check_priority(priority),
                upcasters=dict(upcasters or {}),
            )
            if spec.name in self.tasks and self.tasks[spec.name].fn is not func:
                raise ConfigError(f"task {spec.name!r} is registered twice")
            self.tasks[spec.name] = spec
            if queue not in self.queues:
                self.queue(queue)
            func.__workerpool_task__ = spec.name  # type: ignore[attr-defined]
            return func

        return register(fn) if fn is not None else register

    def task_spec(self, task: str | Callable) -> TaskSpec:
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
        return _positive(STALE_ENV, value, minimum=0)

    def task_versions(self, queue: str) -> dict[str, int]:
        """What a worker of ``queue`` can run: task name → newest payload version it knows."""
        return {t.name: t.version for t in self.tasks.values() if t.queue == queue}

    # -- database ------------------------------------------------------------------------------

    @property
    def url(self) -> URL:
        if self._url is None:
            self._url = db.resolve_url(self._url_arg)
        return self._url

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = db.create(self.url)
        return self._engine

    def use_engine(self, engine: Engine) -> None:
        """Replace the engine (a forked child builds its own)."""
        self._engine = engine

    def forget_engine(self) -> None:
        """Drop the engine inherited over a fork without touching its connections."""
        if self._engine is not None:
            self._engine.dispose(close=False)
        self._engine = None

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None

    def migrate(self, revision: str = "head") -> None:
        from .migrate import upgrade

        upgrade(self.url, revision)

    # -- enqueue -------------------------------------------------------------------------------

    def build(
        self,
        task: str | Callable,
        payload: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> queries.NewJob:
        """Validate one job. Raises a named error for any bad input; touches no database."""
        spec = self.task_spec(task)
        return queries.NewJob(
            queue=spec.queue,
            task=spec.name,
            payload_json=dumps({} if payload is None else payload, limit=self.payload_limit),
            payload_version=spec.version,
            priority=spec.priority if priority is None else check_priority(priority),
            max_attempts=spec.max_attempts if max_attempts is None else check_max_attempts(
                max_attempts, InvalidJob
            ),
            key=check_key(key),
            run_at=check_run_at(run_at),
            delay=check_delay(delay, run_at),
        )

    def enqueue(
        self,
        task: str | Callable,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: Connection | None = None,
        **options: Any,
    ) -> int:
        """Enqueue one job and return its id.

        With ``conn=`` the row is written in the caller's transaction: the job exists if and only
        if that transaction commits. A ``key`` already taken returns the existing job's id.
        """
        row = self.build(task, payload, **options)
        if conn is not None:
            return queries.insert_one(conn, row, notify_queue=self.notify)
        with self.engine.begin() as own:
            return queries.insert_one(own, row, notify_queue=self.notify)

    def enqueue_many(
        self,
        jobs: Iterable[tuple[str | Callable, Mapping[str, Any] | None, Mapping[str, Any]]]
        | Iterable[tuple[str | Callable, Mapping[str, Any] | None]],
        *,
        conn: Connection | None = None,
    ) -> list[int]:
        """Enqueue many jobs in one statement and one NOTIFY; ids in the order given.

        Each item is ``(task, payload)`` or ``(task, payload, options)`` where options are the
        keyword arguments of :meth:`enqueue`. Every item is validated before anything is written.
        """
        rows = [self.build(item[0], item[1], **(item[2] if len(item) > 2 else {})) for item in jobs]
        rows = _dedupe_within_batch(rows)
        if conn is not None:
            return self._write(conn, rows)
        with self.engine.begin() as own:
            return self._write(own, rows)

    def _write(self, conn: Connection, rows: list[queries.NewJob]) -> list[int]:
        return queries.insert_jobs(conn, rows, notify=self.notify)


def _dedupe_within_batch(rows: list[queries.NewJob]) -> list[queries.NewJob]:
    """Two rows of one batch with the same key must be the same job, else IdempotencyConflict."""
    from .errors import IdempotencyConflict

    seen: dict[str, queries.NewJob] = {}
    for row in rows:
        if row.key is None:
            continue
        first = seen.setdefault(row.key, row)
        if (first.task, first.payload_json) != (row.task, row.payload_json):
            raise IdempotencyConflict(f"key {row.key!r} is used twice in one batch with different jobs")
    return rows


def check_max_attempts(value: Any, error: type[Exception] = ConfigError) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_CAP:
        raise error(f"max_attempts must be an int within 1..{MAX_ATTEMPTS_CAP}, got {value!r}")
    return value


def check_version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"version must be an int >= 1, got {value!r}")
    return value


def check_priority(value: Any) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob(f"priority must be an int within {low}..{high}, got {value!r}")
    return value


def check_run_at(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob(f"run_at must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJob("run_at must be timezone-aware (naive datetimes are ambiguous)")
    return value


def check_delay(value: Any, run_at: datetime | None) -> float | None:
    if value is None:
        return None
    if run_at is not None:
        raise InvalidJob("give run_at or delay, not both")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidJob(f"delay must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise InvalidJob(f"delay must be >= 0 seconds, got {value!r}")
    return float(value)
