"""WorkerPool: the registry of queues, tasks and cron jobs, and the enqueue API."""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from . import db, queries
from .backoff import Backoff
from .errors import MAX_DELAY, ConfigError, InvalidJob, UnknownQueue, UnknownTask
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


#: Jobs a child holds beyond its handler slots (QueueSpec.prefetch). Off by default: a
#: prefetched job has its attempt counted at claim, so if a poison message kills the process,
#: every buffered job spends an attempt with it. Turn it on for throughput (README "Performance").
DEFAULT_PREFETCH = 0


@dataclass(frozen=True)
class QueueSpec:
    """One worker type: the supervisor forks one child process per queue.

    ``prefetch``: how many claimed jobs a child may hold beyond its ``concurrency`` handler
    slots, leased and waiting in claim order for the next free slot (0: claim only into free
    slots). It lets one claim fetch many rows; it is also how much of a backlog one child can
    hold back from other replicas, so keep it small.
    """

    name: str
    concurrency: int = 10
    prefetch: int = DEFAULT_PREFETCH
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
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int):
            raise ConfigError(f"queue {self.name}: prefetch must be an int")
        if not 0 <= self.prefetch <= 1000:
            raise ConfigError(f"queue {self.name}: prefetch must be within 0..1000")
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


OVERLAP_POLICIES = ("skip", "allow")
MISSED_POLICIES = ("run_once", "skip")


@dataclass(frozen=True)
class CronSpec:
    """A recurring job: each tick of ``expression`` becomes at most one job row.

    ``overlap="skip"``: a tick whose previous run is still pending, processing or failed (waiting
    to retry) is skipped and counted. ``missed="run_once"``: after downtime the latest missed tick
    runs once; ``"skip"``: nothing runs until the next tick. The task has the cron's name.
    """

    name: str
    expression: str
    queue: str
    overlap: str = "skip"
    missed: str = "run_once"
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        check_name("cron", self.name)
        check_name("queue", self.queue)
        check_cron_expression(self.name, self.expression)
        check_timezone(self.name, self.timezone)
        _choice(f"cron {self.name}: overlap", self.overlap, OVERLAP_POLICIES)
        _choice(f"cron {self.name}: missed", self.missed, MISSED_POLICIES)


@dataclass(frozen=True)
class MaintenanceSpec:
    """What the maintenance child does besides cron: pruning and worker bookkeeping (seconds)."""

    retention: float = 7 * 24 * 3600.0  # done and cancelled rows older than this are deleted
    prune_batch: int = 1000  # rows deleted per statement (short transactions, small WAL bursts)
    prune_batches_per_pass: int = 10  # bound one pass's work; the next pass continues
    worker_ttl: float = 120.0  # workers rows not seen for this long are pruned
    interval: float = 1.0  # seconds between passes (one-second crons need 1.0)

    def __post_init__(self) -> None:
        _positive("maintenance: retention", self.retention)
        _positive("maintenance: worker_ttl", self.worker_ttl)
        _positive("maintenance: interval", self.interval)
        for name in ("prune_batch", "prune_batches_per_pass"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
                raise ConfigError(f"maintenance: {name} must be an int within 1..100000")


class Hooks(list):
    """Callbacks run for every job that goes dead. ``pool.on_dead(fn)`` adds one (a decorator)."""

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ConfigError(f"on_dead hook must be callable, got {type(fn).__name__}")
        self.append(fn)
        return fn


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
        self.on_dead: Hooks = Hooks()  # pool.on_dead(fn): fn(notice) for every job that goes dead
        self.maintenance_settings = MaintenanceSpec()

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
    ) -> Callable[[Callable], Callable]:
        """Run the decorated function on a schedule: ``@pool.cron("0 * * * *", queue="ops")``.

        The function becomes a task (named after it unless ``name=``; ``task_options`` are those of
        :meth:`task`) and a cron job. Bad expression, timezone or policy, or a duplicate name,
        raise ConfigError here; an undeclared queue is refused at start (:func:`validate_crons`).
        """
        if callable(expression):
            raise ConfigError("use @pool.cron(expression, queue=...), not bare @pool.cron")
        if queue is None:
            raise ConfigError(f"cron {expression!r}: queue= is required (the worker type)")

        def register(func: Callable) -> Callable:
            cron_name = check_name("cron", name or func.__name__)
            spec = CronSpec(cron_name, expression, queue, overlap, missed, timezone)
            if cron_name in self.crons:
                raise ConfigError(f"cron {cron_name!r} is declared twice")
            if cron_name in self.tasks:
                raise ConfigError(f"cron {cron_name!r}: a task of that name exists; pass name=")
            options = _cron_task_options(cron_name, task_options)
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
        return queries.NewJob(  # positional, and option checks only when given: this is per row
            spec.queue,
            spec.name,
            dumps({} if payload is None else payload, limit=self.payload_limit),
            spec.version,
            spec.priority if priority is None else check_priority(priority),
            spec.max_attempts if max_attempts is None
            else check_max_attempts(max_attempts, InvalidJob),
            None if key is None else check_key(key),
            None if run_at is None else check_run_at(run_at),
            None if delay is None else check_delay(delay, run_at),
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
            return queries.insert_one(_caller_connection(conn), row, notify_queue=self.notify)
        with self._single_statement() as own:  # a taken key writes nothing: no rollback needed
            return queries.insert_one(own, row, notify_queue=self.notify)

    def enqueue_many(
        self,
        jobs: Iterable[tuple[str | Callable, Mapping[str, Any] | None, Mapping[str, Any]]]
        | Iterable[tuple[str | Callable, Mapping[str, Any] | None]],
        *,
        conn: Connection | None = None,
    ) -> list[int]:
        """Enqueue many jobs atomically, with one NOTIFY; ids in the order given.

        Each item is ``(task, payload)`` or ``(task, payload, options)`` where options are the
        keyword arguments of :meth:`enqueue`. A bad item raises and nothing of the batch is
        written. Up to :data:`INSERT_CHUNK` jobs go in one statement; a larger batch goes in
        chunks of that size, pipelined in one transaction (in the caller's, a savepoint), so the
        database inserts one chunk while the next is checked. A caller's connection on another
        driver than psycopg 3 (psycopg2, say) gets the whole batch in one statement.
        """
        items = _job_items(jobs)
        if conn is not None:
            conn = _caller_connection(conn)
        if len(items) > INSERT_CHUNK and (conn is None or queries.can_pipeline(conn)):
            return self._write_chunks(items, conn)
        rows = self._build_rows(items, {})
        if conn is not None:
            return self._write(conn, rows)
        if all(row.key is None for row in rows):  # no key, no conflict: nothing to roll back
            with self._single_statement() as own:
                return self._write(own, rows)
        with self.engine.begin() as own:  # a taken key may raise after new rows are in
            return self._write(own, rows)

    def _write_chunks(self, items: list[Any], conn: Connection | None) -> list[int]:
        seen: dict[str, queries.NewJob] = {}
        chunks = (self._build_rows(items[start:end], seen)
                  for start, end in _chunk_bounds(len(items)))
        if conn is None:
            with self._single_statement() as own, atomically(own):
                return queries.insert_job_chunks(own, chunks, notify=self.notify)
        with atomically(conn):
            return queries.insert_job_chunks(conn, chunks, notify=self.notify)

    def _build_rows(self, items: list[Any], seen: dict[str, queries.NewJob]
                    ) -> list[queries.NewJob]:
        return _check_batch_keys([self._build_item(item) for item in items], seen)

    def _build_item(self, item: Any) -> queries.NewJob:
        if isinstance(item, tuple | list) and len(item) == 2:
            return self.build(item[0], item[1])
        if isinstance(item, tuple | list) and len(item) == 3 and isinstance(item[2], Mapping):
            return self.build(item[0], item[1], **item[2])
        raise InvalidJob(
            f"each job is (task, payload) or (task, payload, options), got {item!r:.80}"
        )

    @contextmanager
    def _single_statement(self) -> Iterator[Connection]:
        """A connection in autocommit, for a write that is one statement: the statement is its
        own transaction, which saves the BEGIN and COMMIT round trips."""
        with self.engine.connect() as own:
            yield own.execution_options(isolation_level="AUTOCOMMIT")

    def _write(self, conn: Connection, rows: list[queries.NewJob]) -> list[int]:
        return queries.insert_jobs(conn, rows, notify=self.notify)


#: Jobs per statement in :meth:`WorkerPool.enqueue_many`: 250 measured fastest of 100-500 with
#: ``python -m bench --only enqueue``. The server is the slower side (~1.5 ms to insert 250 rows,
#: ~0.6 ms of Python to check and build them), so Python's work hides behind it.
INSERT_CHUNK = 250
#: The first chunk is smaller: nothing overlaps the Python work on it, and the server starts
#: sooner (+4 % rows/s on 1000-job calls, interleaved A/B on this machine).
FIRST_CHUNK = 50


def _chunk_bounds(total: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each chunk: FIRST_CHUNK jobs, then INSERT_CHUNK at a time."""
    start, end = 0, min(FIRST_CHUNK, total)
    while start < total:
        yield start, end
        start, end = end, min(end + INSERT_CHUNK, total)


def _job_items(jobs: Any) -> list[Any]:
    """The items of an ``enqueue_many`` batch (a string, a mapping or a non-iterable is not one)."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        raise InvalidJob(
            "enqueue_many takes an iterable of (task, payload) or (task, payload, options), "
            f"got {type(jobs).__name__}"
        )
    return list(jobs)


def _caller_connection(conn: Any) -> Connection:
    if not isinstance(conn, Connection):
        raise InvalidJob(
            "conn must be a SQLAlchemy Connection (from engine.begin() or engine.connect()), "
            f"got {type(conn).__name__}"
        )
    return conn


def atomically(conn: Connection) -> AbstractContextManager:
    """All or nothing for several statements on ``conn``: a savepoint in the caller's
    transaction, or a transaction of its own on a connection in autocommit."""
    driver = conn.connection.driver_connection
    if driver.autocommit:
        return driver.transaction()
    return conn.begin_nested()


def _check_batch_keys(rows: list[queries.NewJob], seen: dict[str, queries.NewJob]
                      ) -> list[queries.NewJob]:
    """Two rows of one batch with the same key must be the same job, else IdempotencyConflict.
    ``seen`` carries the keys of the batch's earlier chunks."""
    from .errors import IdempotencyConflict

    for row in rows:
        if row.key is None:
            continue
        first = seen.setdefault(row.key, row)
        if (first.task, first.payload_json) != (row.task, row.payload_json):
            raise IdempotencyConflict(
                f"key {row.key!r} is used twice in one batch with different jobs"
            )
    return rows


def validate_crons(pool: WorkerPool) -> None:
    """Refuse at start a cron whose queue no worker type serves (one clear ConfigError)."""
    for spec in pool.crons.values():
        if spec.queue not in pool.queues:
            raise ConfigError(
                f"cron {spec.name!r}: queue {spec.queue!r} is not declared "
                f"(declared: {sorted(pool.queues)}); add pool.queue({spec.queue!r})"
            )


def check_cron_expression(name: str, expression: Any) -> str:
    """A croniter expression that yields ticks (5 fields, a 6th for seconds, or @hourly etc.)."""
    from croniter import croniter

    if not isinstance(expression, str) or not expression.strip():
        raise ConfigError(f"cron {name}: expression must be a non-empty string, got {expression!r}")
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except Exception as exc:  # croniter raises several unrelated classes for bad input
        raise ConfigError(f"cron {name}: bad expression {expression!r}: {exc}") from None
    return expression


def check_timezone(name: str, timezone: Any) -> str:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(timezone)
    except Exception:
        raise ConfigError(f"cron {name}: unknown timezone {timezone!r} (use an IANA name)") \
            from None
    return timezone


def _choice(what: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _cron_task_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    allowed = {"max_attempts", "timeout", "version", "backoff", "priority"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"cron {name}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
    try:
        return _checked_task_options(options)
    except ValueError as exc:
        raise ConfigError(f"cron {name}: {exc}") from None


def _checked_task_options(options: dict[str, Any]) -> dict[str, Any]:
    checked = dict(options)
    if "max_attempts" in checked:
        checked["max_attempts"] = check_max_attempts(checked["max_attempts"])
    if "timeout" in checked:
        checked["timeout"] = _positive("timeout", checked["timeout"], allow_none=True)
    if "version" in checked:
        checked["version"] = check_version(checked["version"])
    if "priority" in checked:
        checked["priority"] = check_priority(checked["priority"])
    if checked.get("backoff") is None:
        checked.pop("backoff", None)
    return checked


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
    if not 0 <= value <= MAX_DELAY:
        raise InvalidJob(f"delay must be within 0..{MAX_DELAY:.0f} seconds, got {value!r}")
    return float(value)
