"""What an application declares: its worker types, tasks, cron jobs, maintenance settings and
hooks.

Each spec is frozen and checks itself when built, so a bad setting fails when the application
is imported, with a ConfigError naming it.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import time
from typing import TYPE_CHECKING, Any

from .backoff import Backoff
from .errors import ConfigError
from .limits import check_limit, parse_rate
from .validation import (
    check_choice,
    check_cron_expression,
    check_name,
    check_positive,
    check_timezone,
)

if TYPE_CHECKING:
    from .typed import Signature

#: ``QueueSpec.processes="auto"``: one child per core the supervisor may use (its CPU affinity,
#: capped by a container's CPU limit: :func:`workerpool.process.oslayer.usable_cpus`).
AUTO_PROCESSES = "auto"
#: The most children one queue may have in one supervisor.
MAX_PROCESSES = 256
#: The largest bound a queue may have (the room check reads at most this many index entries).
MAX_PENDING = 100_000_000

#: Jobs a child holds beyond its handler slots (QueueSpec.prefetch). None: sized to the
#: handlers' speed (workerpool/worker/buffer.py), so fast jobs are claimed in batches and slow
#: ones, whose suspects a crash would make costly to recover, get no buffer.
DEFAULT_PREFETCH: int | None = None


@dataclass(frozen=True)
class QueueSpec:
    """One worker type: the supervisor forks ``processes`` child processes per queue.

    ``processes``: how many children of this queue one supervisor keeps alive (1..256), or
    ``"auto"``: one per core the supervisor may use (its affinity, capped by a container's CPU
    limit), resolved by ``workerpool run`` on the host it runs on. Each
    child has its own handler threads, connections, heartbeat file and restart back-off.

    ``prefetch``: how many claimed jobs a child may hold beyond its ``concurrency`` handler
    slots, leased and waiting in claim order for the next free slot (0: claim only into free
    slots; None, the default: as many as the handlers finish during one claim's round trip, at
    most 5 x ``concurrency``, none on a queue with limits). It lets one claim fetch many rows; it is
    also how much of a backlog one child can hold back from other replicas, so keep it small.
    """

    name: str
    concurrency: int = 10
    prefetch: int | None = DEFAULT_PREFETCH
    stale_after: float = 300.0
    drain_timeout: float = 30.0
    hang_timeout: float = 60.0
    poll_interval: float = 1.0
    notify: bool = True
    #: Seconds a running handler asked to stop (a cancel) gets before its row is written
    #: ``cancelled`` without it and the process is recycled once its other jobs finish.
    cancel_grace: float = 10.0
    #: Jobs of this queue ``processing`` at once, counted across every replica (None: no limit).
    global_concurrency: int | None = None
    #: Claims per window across every replica: ``"100/s"``, ``"20/m"``, ``"500/h"``.
    rate_limit: str | None = None
    #: Children of this queue per supervisor: an int, or "auto" (one per core).
    processes: int | str = 1
    #: Keep each attempt's log records from its handler (docs/handlers.md): off by default.
    capture_logs: bool = False
    #: Jobs waiting to run (pending, failed, waiting) past which an enqueue raises QueueFull
    #: (None: unbounded; docs/doors.md).
    max_pending: int | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.name)
        check_processes(f"queue {self.name}: processes", self.processes)
        check_limit(f"queue {self.name}: global_concurrency", self.global_concurrency)
        check_max_pending(f"queue {self.name}: max_pending", self.max_pending)
        if self.rate_limit is not None:
            parse_rate(f"queue {self.name}: rate_limit", self.rate_limit)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise ConfigError(f"queue {self.name}: concurrency must be an int")
        if not 1 <= self.concurrency <= 1000:
            raise ConfigError(f"queue {self.name}: concurrency must be within 1..1000")
        self._check_prefetch()
        check_positive(f"queue {self.name}: stale_after", self.stale_after, minimum=0)
        check_positive(f"queue {self.name}: drain_timeout", self.drain_timeout, minimum=-1)
        check_positive(f"queue {self.name}: hang_timeout", self.hang_timeout, minimum=0)
        check_positive(f"queue {self.name}: poll_interval", self.poll_interval, minimum=0)
        if not isinstance(self.capture_logs, bool):
            raise ConfigError(
                f"queue {self.name}: capture_logs must be True or False, got {self.capture_logs!r}"
            )
        grace = self.cancel_grace
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not grace >= 0
            or (grace == float("inf"))
        ):
            raise ConfigError(
                f"queue {self.name}: cancel_grace must be a finite number of"
                f" seconds >= 0, got {grace!r}"
            )

    def _check_prefetch(self) -> None:
        if self.prefetch is None:  # sized at run time
            return
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int):
            raise ConfigError(f"queue {self.name}: prefetch must be an int or None")
        if not 0 <= self.prefetch <= 1000:
            raise ConfigError(f"queue {self.name}: prefetch must be within 0..1000")


def check_max_pending(what: str, value: Any) -> int | None:
    """A queue's bound: None (unbounded) or an int within 1..MAX_PENDING."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PENDING:
        raise ConfigError(f"{what} must be an int within 1..{MAX_PENDING}, got {value!r}")
    return value


def check_processes(what: str, value: Any) -> int | str:
    """A number of children: an int within 1..MAX_PROCESSES, or "auto"."""
    if isinstance(value, str) and value == AUTO_PROCESSES:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PROCESSES:
        raise ConfigError(
            f"{what} must be an int within 1..{MAX_PROCESSES} or {AUTO_PROCESSES!r}, got {value!r}"
        )
    return value


def resolve_processes(value: int | str, cpu_count: int | None) -> int:
    """The number of children ``value`` means on a host with ``cpu_count`` cores."""
    if value == AUTO_PROCESSES:
        return max(1, min(cpu_count or 1, MAX_PROCESSES))
    return int(value)


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
    #: Jobs with one concurrency key ``processing`` at once, cluster-wide (None: no limit).
    concurrency_limit: int | None = None
    #: The concurrency key of a job enqueued without one, from its payload (default: the name).
    concurrency_key: Callable[[Mapping[str, Any]], str] | None = None
    #: Claims per window per concurrency key (``"10/s"``); None: no limit.
    key_rate_limit: str | None = None
    #: Seconds this task's done and cancelled rows (and so their results) are kept before the
    #: pruning deletes them; None: the maintenance ``retention``.
    result_ttl: float | None = None
    #: A job of this task whose parent (``after=``) ends dead or cancelled: ``"cancel"`` it
    #: (the default), or ``"run"`` it anyway once its other parents are done.
    on_dependency_failure: str = "cancel"
    #: A job of this task that ends dead in a sequence: ``"release"`` the next one (the
    #: default), or ``"block"`` the sequence until an operator replays it or cancels the next.
    on_failure: str = "release"

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def signature(self) -> Signature | None:
        """The handler's typed parameters and return type (:mod:`workerpool.model.typed`);
        None for a handler that takes only the ``Job`` and returns JSON as it is."""
        from .typed import Signature

        try:
            signature = Signature(self.name, self.fn)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            return None  # a callable inspect cannot read: called with the job alone
        return signature if signature.typed or signature.result is not None else None

    def call(self, job: Any) -> Any:
        """Run the handler on ``job``: ``fn(job)``, or with its typed arguments
        (:meth:`Signature.call <workerpool.model.typed.Signature.call>`)."""
        signature = self.signature
        return self.fn(job) if signature is None else signature.call(job)


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
        check_choice(f"cron {self.name}: overlap", self.overlap, OVERLAP_POLICIES)
        check_choice(f"cron {self.name}: missed", self.missed, MISSED_POLICIES)


@dataclass(frozen=True)
class MaintenanceSpec:
    """What the maintenance child does besides cron: pruning and worker bookkeeping (seconds)."""

    retention: float = 7 * 24 * 3600.0  # done and cancelled rows older than this are deleted
    prune_batch: int = 1000  # rows deleted per statement (short transactions, small WAL bursts)
    prune_batches_per_pass: int = 10  # bound one pass's work; the next pass continues
    worker_ttl: float = 120.0  # workers rows not seen for this long are pruned
    interval: float = 1.0  # seconds between passes (one-second crons need 1.0)
    #: Rebuild an index of the jobs table (REINDEX CONCURRENTLY) once it is this many times the
    #: size its entries would take packed, and it (or, for an index of 1 MiB or more, the
    #: table's indexes together) at least ``reindex_min_bytes``.
    reindex_bloat: float = 3.0
    reindex_min_bytes: int = 8 * 1024 * 1024
    #: ``("08:00", "20:00")``: no rebuild starts between these times of day (UTC; a window
    #: may wrap past midnight). None: any time.
    busy_hours: tuple[str, str] | None = None
    audit_retention: float = 90 * 24 * 3600.0  # audit entries older than this are deleted
    #: Move done and cancelled rows into the history table (docs/storage.md); False keeps them
    #: in the jobs table until the pruning deletes them.
    history: bool = True
    #: Days each history partition covers (aligned on the Unix epoch, UTC); the retention drops
    #: a partition whole once its last day is past it.
    history_partition_days: int = 1
    #: Partitions kept created ahead of today, so a move never waits for one.
    history_ahead: int = 3
    #: Seconds a finished row stays in the jobs table before it moves.
    history_delay: float = 60.0
    #: Rows moved per statement (one short transaction each; ``prune_batches_per_pass`` of
    #: them per pass).
    history_batch: int = 5000

    def __post_init__(self) -> None:
        check_positive("maintenance: retention", self.retention)
        check_positive("maintenance: audit_retention", self.audit_retention)
        if not isinstance(self.history, bool):
            raise ConfigError(f"maintenance: history must be True or False, got {self.history!r}")
        for name, top in (
            ("history_partition_days", 366),
            ("history_ahead", 366),
            ("history_batch", 100_000),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ConfigError(
                    f"maintenance: {name} must be an int within 1..{top}, got {value!r}"
                )
        if (
            isinstance(self.history_delay, bool)
            or not isinstance(self.history_delay, int | float)
            or not 0 <= self.history_delay < float("inf")
        ):
            raise ConfigError(
                f"maintenance: history_delay must be seconds >= 0, got {self.history_delay!r}"
            )
        check_positive("maintenance: reindex_bloat", self.reindex_bloat, minimum=1.0)
        if (
            isinstance(self.reindex_min_bytes, bool)
            or not isinstance(self.reindex_min_bytes, int)
            or self.reindex_min_bytes < 0
        ):
            raise ConfigError(
                "maintenance: reindex_min_bytes must be an int >= 0, got"
                f" {self.reindex_min_bytes!r}"
            )
        busy_window(self.busy_hours)
        check_positive("maintenance: worker_ttl", self.worker_ttl)
        check_positive("maintenance: interval", self.interval)
        for name in ("prune_batch", "prune_batches_per_pass"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
                raise ConfigError(f"maintenance: {name} must be an int within 1..100000")


def busy_window(hours: Any) -> tuple[time, time] | None:
    """``("HH:MM", "HH:MM")`` as two times of day; ConfigError for anything else."""
    if hours is None:
        return None
    try:
        start, end = hours
        window = (time.fromisoformat(start), time.fromisoformat(end))
    except (TypeError, ValueError):
        raise ConfigError(
            f'maintenance: busy_hours must be ("HH:MM", "HH:MM") in UTC, got {hours!r}'
        ) from None
    if window[0] == window[1]:
        raise ConfigError(f"maintenance: busy_hours {hours!r} is an empty window")
    return window


def in_window(window: tuple[time, time] | None, now: time) -> bool:
    """Whether ``now`` falls in ``window`` (which may wrap past midnight)."""
    if window is None:
        return False
    start, end = window
    return start <= now < end if start < end else now >= start or now < end


class Hooks(list[Callable[..., Any]]):
    """Callbacks run for every job that goes dead (or is cancelled). ``pool.on_dead(fn)`` adds
    one (a decorator)."""

    def __init__(self, name: str = "on_dead") -> None:
        super().__init__()
        self.name = name

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ConfigError(f"{self.name} hook must be callable, got {type(fn).__name__}")
        self.append(fn)
        return fn


class WorkerKind(enum.StrEnum):
    QUEUE = "queue"  # a Worker claiming from one queue
    MAINTENANCE = "maintenance"  # the maintenance loop


@dataclass(frozen=True)
class WorkerType:
    """One child the supervisor keeps alive: a queue's (one of its ``processes``), or the
    maintenance loop. ``name`` names the child (its heartbeat file, its logs, its metrics):
    the queue's name when the queue has one child, ``<queue>.<index>`` when it has several."""

    name: str
    kind: WorkerKind
    drain_timeout: float
    hang_timeout: float
    #: A queue's effective settings (the pool's, with the environment's overrides applied):
    #: what its children's Worker runs with. None for the maintenance loop.
    spec: QueueSpec | None = None

    @property
    def queue(self) -> str:
        """The queue this child claims from (its name for the maintenance loop)."""
        return self.spec.name if self.spec is not None else self.name
