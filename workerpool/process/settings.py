"""Settings of `workerpool run`, checked before anything is forked, and the environment.

Every refusal is a :class:`~workerpool.model.errors.ConfigError` whose message is one line that
says what is wrong and what to change. The deploy files import the constants below.

This module is the one place that reads environment variables (:data:`ENVIRONMENT` lists them).
Each reader returns the variable's value now; a process reads each once, when it sets up (a
pool its engines, ``workerpool run`` its settings, a command its output), and hands the value
down: the layers below never read the environment.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.errors import ConfigError, UnknownQueue
from ..model.specs import QueueSpec, WorkerKind, WorkerType, check_processes, resolve_processes
from ..model.validation import check_positive
from . import heartbeat, oslayer
from .heartbeat import DEFAULT_MAX_AGE, HEARTBEAT_PERIOD, MAINTENANCE, RESERVED_NAMES

__all__ = [
    "DEFAULT_MAX_AGE",
    "DRAIN_MARGIN",
    "HEARTBEAT_PERIOD",
    "MAINTENANCE",
    "RELEASE_MARGIN",
    "SHUTDOWN_MARGIN",
    "RunSettings",
    "WorkerKind",
    "WorkerType",
    "load",
]

URL_ENV = "WORKERPOOL_DATABASE_URL"
EMBEDDED_DIR_ENV = "WORKERPOOL_EMBEDDED_DIR"
PGBOUNCER_ENV = "WORKERPOOL_PGBOUNCER"
STALE_ENV = "WORKER_CLAIM_STALE_MS"
HEARTBEAT_DIR_ENV = "WORKERPOOL_HEARTBEAT_DIR"
DRAIN_ENV = "WORKERPOOL_DRAIN_TIMEOUT"
GRACE_ENV = "WORKERPOOL_GRACE_PERIOD"
METRICS_PORT_ENV = "WORKERPOOL_METRICS_PORT"
METRICS_BIND_ENV = "WORKERPOOL_METRICS_BIND"
LOG_FORMAT_ENV = "WORKERPOOL_LOG_FORMAT"
PROGRESS_ENV = "WORKERPOOL_PROGRESS"
WEB_TOKEN_ENV = "WORKERPOOL_WEB_TOKEN"
TEST_URL_ENV = "WORKERPOOL_TEST_DATABASE_URL"
SCHEMA_ENV = "WORKERPOOL_SCHEMA"
READ_URL_ENV = "WORKERPOOL_READ_URL"
#: Every variable workerpool reads (docs/configuration.md describes each).
ENVIRONMENT = (
    URL_ENV,
    EMBEDDED_DIR_ENV,
    PGBOUNCER_ENV,
    STALE_ENV,
    HEARTBEAT_DIR_ENV,
    DRAIN_ENV,
    GRACE_ENV,
    METRICS_PORT_ENV,
    METRICS_BIND_ENV,
    LOG_FORMAT_ENV,
    PROGRESS_ENV,
    WEB_TOKEN_ENV,
    TEST_URL_ENV,
    SCHEMA_ENV,
    READ_URL_ENV,
)
DEFAULT_METRICS_BIND = "127.0.0.1"
DEFAULT_EMBEDDED_DIR = ".workerpool/pgdata"


# -- the environment ----------------------------------------------------------------------------


def _get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value, None when unset or empty."""
    return (os.environ if environ is None else environ).get(name) or None


def database_url() -> str | None:
    """``$WORKERPOOL_DATABASE_URL``: where a pool connects when it is given no URL."""
    return _url(URL_ENV, "use the embedded PostgreSQL")


def _url(name: str, unset_means: str) -> str | None:
    """A URL variable: set but blank is a mistake (a template that lost its value), not the
    same as unset, which falls back to something else."""
    value = os.environ.get(name)
    if value is not None and not value.strip():
        raise ConfigError(f"{name} is set but empty: give a URL, or unset it to {unset_means}")
    return value


def schema() -> str | None:
    """``$WORKERPOOL_SCHEMA``: the schema of a pool's tables when it is given none."""
    return _get(SCHEMA_ENV)


def read_url() -> str | None:
    """``$WORKERPOOL_READ_URL``: a replica that status, the dashboard and the depth samples read."""
    return _url(READ_URL_ENV, "read the primary")


def embedded_dir() -> Path:
    """Where the embedded PostgreSQL keeps its data: ``$WORKERPOOL_EMBEDDED_DIR``, else
    ``.workerpool/pgdata`` under the current directory."""
    return Path(_get(EMBEDDED_DIR_ENV) or DEFAULT_EMBEDDED_DIR).absolute()


def transaction_pooling() -> bool:
    """``$WORKERPOOL_PGBOUNCER=1``: connections go through PgBouncer in transaction pooling mode
    (no session state: no server-side prepared statements, no LISTEN, no startup options)."""
    return (_get(PGBOUNCER_ENV) or "").lower() in ("1", "true", "yes", "on")


def heartbeat_directory() -> Path | None:
    """``$WORKERPOOL_HEARTBEAT_DIR``, else None: each supervisor takes its own default."""
    configured = _get(HEARTBEAT_DIR_ENV)
    return Path(configured) if configured else None


def heartbeat_base() -> Path:
    """Where the default heartbeat directories go: under ``$XDG_RUNTIME_DIR`` when the session
    has one, else a per-user directory on tmpfs (:func:`.heartbeat.base_dir`)."""
    return heartbeat.base_dir(_get("XDG_RUNTIME_DIR"))


def heartbeat_bases() -> list[Path]:
    """Where `workerpool healthcheck` looks for them: :func:`heartbeat_base`, and the tmpfs one
    too (a supervisor under systemd has no ``$XDG_RUNTIME_DIR``; a login shell has one)."""
    return list(dict.fromkeys([heartbeat_base(), heartbeat.base_dir(None)]))


def log_format() -> str | None:
    """``$WORKERPOOL_LOG_FORMAT``: text, json or auto (checked by the command line)."""
    return _get(LOG_FORMAT_ENV)


def progress() -> str:
    """``$WORKERPOOL_PROGRESS``: 1 forces progress bars, 0 hides them, unset: on a terminal."""
    return (_get(PROGRESS_ENV) or "").strip()


def web_token(environ: Mapping[str, str] | None = None) -> str | None:
    """``$WORKERPOOL_WEB_TOKEN``: the dashboard's bearer token (checked by the dashboard)."""
    return _get(WEB_TOKEN_ENV, environ)


def test_database_url() -> str | None:
    """``$WORKERPOOL_TEST_DATABASE_URL``: where the pytest plugin makes throwaway databases."""
    return _get(TEST_URL_ENV)


#: Seconds the supervisor waits beyond drain_timeout before it SIGKILLs what is left: time for a
#: child to release its unfinished jobs and exit.
DRAIN_MARGIN = 2.0
#: Seconds the supervisor then gives its short-lived releaser child (forked only if a child died
#: during shutdown without releasing its claims) before it SIGKILLs it and exits anyway.
RELEASE_MARGIN = 3.0
#: The whole stop budget beyond drain_timeout: the orchestrator's grace must exceed
#: drain_timeout + SHUTDOWN_MARGIN.
SHUTDOWN_MARGIN = DRAIN_MARGIN + RELEASE_MARGIN
#: A lease shorter than this is refused: renewals and polls could not keep up.
MIN_STALE_AFTER = 3.0
#: First restart after a crash is immediate; consecutive fast failures wait
#: restart_delay * 2**(n-2), capped here.
RESTART_DELAY = 1.0
RESTART_DELAY_CAP = 30.0
#: A child that ran this long before dying is restarted at once (its crash count resets).
STABLE_AFTER = 10.0
#: Exits before the first heartbeat tick in a row after which the supervisor gives up.
BOOT_RETRIES = 5
#: The maintenance child must report at least this often (seconds) or it is replaced.
MAINTENANCE_HANG_FLOOR = 60.0


@dataclass(frozen=True)
class RunSettings:
    workers: tuple[WorkerType, ...]
    heartbeat_dir: Path
    #: Every declared queue's settings for this run (:func:`queue_settings`), served or not.
    queues: Mapping[str, QueueSpec] = dataclasses.field(default_factory=dict)
    grace: float | None = None
    restart_delay: float = RESTART_DELAY
    boot_retries: int = BOOT_RETRIES
    drain_margin: float = DRAIN_MARGIN
    release_margin: float = RELEASE_MARGIN
    metrics_port: int | None = None  # serve GET /metrics (process/exporter.py) when set
    metrics_bind: str = "127.0.0.1"
    #: Connections go through PgBouncer in transaction pooling mode (``$WORKERPOOL_PGBOUNCER``).
    pooled: bool = False
    #: Who runs (the APP:POOL target and the database, password hidden): recorded beside the
    #: heartbeat files so that `workerpool healthcheck --app` finds this supervisor's.
    app: str | None = None
    database: str | None = None

    @property
    def drain_timeout(self) -> float:
        """The longest drain of any child: the supervisor waits this plus the margin."""
        return max(w.drain_timeout for w in self.workers)

    @property
    def shutdown_budget(self) -> float:
        """The longest a stop can take: drain, the margin, then the releaser's margin."""
        return self.drain_timeout + self.drain_margin + self.release_margin


def load(
    pool: Any,
    queues: list[str] | None = None,
    *,
    heartbeat_dir: str | Path | None = None,
    grace: float | str | None = None,
    restart_delay: float = RESTART_DELAY,
    boot_retries: int = BOOT_RETRIES,
    maintenance_interval: float | None = None,
    metrics_port: int | str | None = None,
    metrics_bind: str | None = None,
    processes: list[str] | Mapping[str, int | str] | None = None,
    cpu_count: int | None = None,
    app: str | None = None,
    database: str | None = None,
) -> RunSettings:
    """Validate everything `run` needs, from the registry ``pool`` declares and the environment.
    The registry is left as declared: ``$WORKERPOOL_DRAIN_TIMEOUT`` and
    ``$WORKER_CLAIM_STALE_MS`` apply to the queue settings each worker type carries (and to
    ``RunSettings.queues``, what the maintenance child sweeps).

    ``maintenance_interval``: seconds between maintenance passes, or None for no maintenance child.
    ``processes``: children per queue for this run, replacing the declared ``processes``
    (``--processes QUEUE=N`` as given, or a mapping); ``cpu_count`` what ``"auto"`` means
    (default: the cores this process may use, :func:`.oslayer.usable_cpus`).
    ``app`` and ``database`` name the run: without a heartbeat directory given, the first free
    default one of this app on this database (:func:`.heartbeat.default_dirs`).
    """
    names = _queue_names(pool, queues)
    # a cron on a queue no worker type serves: refused before any fork
    pool.registry.validate_crons()
    effective = queue_settings(pool, processes_overrides(processes, names))
    cores = oslayer.usable_cpus() if cpu_count is None else cpu_count
    workers = [child for name in names for child in _queue_types(effective[name], cores)]
    _check_child_names(workers)
    if maintenance_interval is not None:
        workers.append(_maintenance_type(workers, maintenance_interval))
    settings = RunSettings(
        workers=tuple(workers),
        queues=effective,
        pooled=transaction_pooling(),
        heartbeat_dir=_heartbeat_dir(heartbeat_dir, app, database),
        app=app,
        database=database,
        grace=_grace(grace),
        restart_delay=_number("--restart-delay", restart_delay, minimum=0.0),
        boot_retries=_count("--boot-retries", boot_retries),
        **_metrics(metrics_port, metrics_bind),
    )
    _check_grace(settings, pool)
    _check_heartbeat_dir(settings.heartbeat_dir)
    return settings


def _queue_names(pool: Any, queues: list[str] | None) -> list[str]:
    if not pool.queues:
        raise ConfigError("the pool declares no queues: add pool.queue(...) or a task")
    names = list(dict.fromkeys(queues or pool.queues))
    for name in names:
        if name not in pool.queues:
            declared = ", ".join(sorted(pool.queues))
            raise UnknownQueue(f"unknown queue {name!r}; declared: {declared}")
        if name in RESERVED_NAMES:
            raise ConfigError(
                f"queue name {name!r} is reserved for the supervisor's own "
                f"processes ({', '.join(RESERVED_NAMES)}); rename the queue"
            )
    return names


def queue_settings(
    registry: Any, processes: Mapping[str, int | str] | None = None
) -> dict[str, QueueSpec]:
    """Every declared queue's settings for this run: as declared, with the environment's
    overrides (``$WORKERPOOL_DRAIN_TIMEOUT``, ``$WORKER_CLAIM_STALE_MS``) and ``processes``
    (queue -> children, from ``--processes``) applied."""
    overrides: dict[str, float] = {}
    drain_timeout, stale_after = _drain_override(), _stale_override()
    if drain_timeout is not None:
        overrides["drain_timeout"] = drain_timeout
    if stale_after is not None:
        overrides["stale_after"] = stale_after
    processes = processes or {}
    return {
        name: _replaced(spec, overrides, processes.get(name))
        for name, spec in registry.queues.items()
    }


def _replaced(
    spec: QueueSpec, overrides: Mapping[str, float], processes: int | str | None
) -> QueueSpec:
    changes: dict[str, Any] = dict(overrides)
    if processes is not None:
        changes["processes"] = processes
    return dataclasses.replace(spec, **changes) if changes else spec


def processes_overrides(
    given: list[str] | Mapping[str, int | str] | None, served: list[str]
) -> dict[str, int | str]:
    """``--processes QUEUE=N`` (repeatable; N an int or "auto") as queue -> children, each
    checked: a queue this run serves, a count within bounds. The last one for a queue wins."""
    if not given:
        return {}
    pairs = given.items() if isinstance(given, Mapping) else map(_split_processes, given)
    overrides: dict[str, int | str] = {}
    for queue, value in pairs:
        if queue not in served:
            raise ConfigError(
                f"--processes {queue}={value}: this run serves no queue {queue!r}"
                f" (serving: {', '.join(served)})"
            )
        overrides[queue] = check_processes(f"--processes {queue}", value)
    return overrides


def _split_processes(text: str) -> tuple[str, int | str]:
    queue, sep, count = text.partition("=")
    count = count.strip()
    if not sep or not queue.strip() or not count:
        raise ConfigError(f"--processes takes QUEUE=N (N an int or 'auto'), got {text!r}")
    if count == "auto":
        return queue.strip(), count
    try:
        return queue.strip(), int(count)
    except ValueError:
        raise ConfigError(
            f"--processes {queue.strip()}: N must be an int or 'auto', got {count!r}"
        ) from None


def _drain_override() -> float | None:
    raw = _get(DRAIN_ENV)
    if raw is None:
        return None
    return _number(DRAIN_ENV, raw, minimum=0.0)


def _stale_override() -> float | None:
    """``$WORKER_CLAIM_STALE_MS`` in seconds, if set: it replaces every queue's stale_after."""
    raw = _get(STALE_ENV)
    if raw is None:
        return None
    try:
        value = float(raw) / 1000
    except ValueError:
        raise ConfigError(f"{STALE_ENV} must be milliseconds, got {raw!r}") from None
    return float(check_positive(STALE_ENV, value, minimum=0))


def _queue_types(spec: QueueSpec, cpu_count: int | None) -> list[WorkerType]:
    """The children of one queue: ``render`` alone, or ``render.0`` .. ``render.<N-1>``."""
    checked = _queue_type(spec)
    count = resolve_processes(spec.processes, cpu_count)
    if count == 1:
        return [checked]
    return [
        dataclasses.replace(checked, name=child_name(spec.name, index)) for index in range(count)
    ]


def child_name(queue: str, index: int) -> str:
    """The name of a queue's child ``index`` when the queue has several children."""
    return f"{queue}.{index}"


def _check_child_names(workers: list[WorkerType]) -> None:
    """Queue names may contain '.': ``render.1``, a queue, would share its heartbeat file with
    the second child of ``render``. Refused before anything is forked."""
    seen: dict[str, str] = {}
    for worker in workers:
        if worker.name in seen:
            raise ConfigError(
                f"child name {worker.name!r} is taken twice (queues "
                f"{seen[worker.name]!r} and {worker.queue!r}); rename a queue or "
                f"change its processes"
            )
        seen[worker.name] = worker.queue


def _queue_type(spec: QueueSpec) -> WorkerType:
    name, stale_after = spec.name, spec.stale_after
    if stale_after < MIN_STALE_AFTER:
        raise ConfigError(
            f"queue {name}: stale_after is {stale_after:g}s; use at least "
            f"{MIN_STALE_AFTER:g}s (check WORKER_CLAIM_STALE_MS)"
        )
    if spec.hang_timeout < 2 * spec.poll_interval:
        raise ConfigError(
            f"queue {name}: hang_timeout ({spec.hang_timeout:g}s) must be at least "
            f"twice poll_interval ({spec.poll_interval:g}s), or an idle child "
            f"looks hung"
        )
    return WorkerType(name, WorkerKind.QUEUE, spec.drain_timeout, spec.hang_timeout, spec)


def _maintenance_type(queues: list[WorkerType], interval: float) -> WorkerType:
    hang = max([MAINTENANCE_HANG_FLOOR, 3 * interval] + [q.hang_timeout for q in queues])
    drain = max(q.drain_timeout for q in queues)
    return WorkerType(MAINTENANCE, WorkerKind.MAINTENANCE, drain, hang)


def _grace(value: float | str | None) -> float | None:
    if value is None or value == "":
        value = _get(GRACE_ENV)
        if value is None:
            return None
        return _number(GRACE_ENV, value, minimum=0.0, strict=True)
    return _number("--grace", value, minimum=0.0, strict=True)


def _check_grace(settings: RunSettings, pool: Any) -> None:
    if settings.grace is None:
        return
    if settings.shutdown_budget >= settings.grace:
        slowest = max(settings.workers, key=lambda w: w.drain_timeout)
        margin = settings.drain_margin + settings.release_margin
        raise ConfigError(
            f"drain_timeout of {slowest.name} ({slowest.drain_timeout:g}s) plus the "
            f"{margin:g}s shutdown margin is not below the orchestrator grace period "
            f"({settings.grace:g}s): jobs would be SIGKILLed mid-drain; lower drain_timeout "
            f"or raise the grace period"
        )


def _metrics(port: int | str | None, bind: str | None) -> dict[str, Any]:
    """``--metrics-port`` / ``$WORKERPOOL_METRICS_PORT``, and the address to bind."""
    name = "--metrics-port"
    if port is None or port == "":
        port, name = _get(METRICS_PORT_ENV), METRICS_PORT_ENV
    bind = bind or _get(METRICS_BIND_ENV) or DEFAULT_METRICS_BIND
    if port is None:
        return {}
    try:
        number = int(port)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a TCP port (1..65535), got {port!r}") from None
    if not 1 <= number <= 65535:
        raise ConfigError(f"{name} must be a TCP port (1..65535), got {port!r}")
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"{name}: metrics need prometheus_client: pip install 'workerpool[metrics]'"
        ) from None
    return {"metrics_port": number, "metrics_bind": bind}


def _heartbeat_dir(given: str | Path | None, app: str | None, database: str | None) -> Path:
    """The directory given (``--heartbeat-dir``, else ``$WORKERPOOL_HEARTBEAT_DIR``), else the
    first default one of this app on this database that no live supervisor holds."""
    given = Path(given) if given else heartbeat_directory()
    if given is not None:
        return given
    candidates = heartbeat.default_dirs(heartbeat_base(), app or "", database or "")
    return next((d for d in candidates if not heartbeat.held(d)), candidates[-1])


def _check_heartbeat_dir(directory: Path) -> None:
    """Refused before any fork: an unsafe directory, or one a live supervisor holds (clearing
    it would delete the files that supervisor's probe reads)."""
    try:
        if heartbeat.held(directory):
            holder = heartbeat.read_owner(directory)
            raise heartbeat.HeartbeatDirBusy(
                f"heartbeat dir {directory} is in use by a live supervisor "
                f"({holder.describe()}); give each supervisor its own --heartbeat-dir"
            )
        if directory.parent == heartbeat_base():  # a default one: its parent's owner could
            heartbeat.check_dir(directory.parent)  # rename it away, so the parent is ours too
        heartbeat.prepare_dir(directory)
    except heartbeat.HeartbeatDirError as exc:
        raise ConfigError(str(exc)) from None


def _number(name: str, value: Any, *, minimum: float, strict: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    too_small = number <= minimum if strict else number < minimum
    if not math.isfinite(number) or too_small:
        bound = ">" if strict else ">="
        raise ConfigError(f"{name} must be a finite number {bound} {minimum:g}, got {value!r}")
    return number


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value
