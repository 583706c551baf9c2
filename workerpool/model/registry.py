"""The registry: what an application declares (queues, tasks, cron jobs, maintenance, hooks).

``WorkerPool`` holds one and adds the database; a child process is handed one (its specs and
hooks) and never the pool. Declaring touches no database: every bad setting raises a
ConfigError naming it while the application is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from .backoff import Backoff
from .dependencies import DEPENDENCY_FAILURE_POLICIES, SEQUENCE_FAILURE_POLICIES
from .errors import ConfigError, UnknownQueue, UnknownTask
from .limits import check_task_limits
from .payload import DEFAULT_PAYLOAD_LIMIT, PAYLOAD_HARD_LIMIT
from .specs import CronSpec, Hooks, MaintenanceSpec, QueueSpec, TaskSpec
from .validation import (
    check_choice,
    check_cron_task_options,
    check_max_attempts,
    check_name,
    check_positive,
    check_priority,
    check_version,
)


def _seconds(value: Any) -> Any:
    """A timedelta as seconds; anything else as given (checked by the caller)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


class Registry:
    """Queues, tasks and cron jobs of one application, their maintenance settings and hooks.

    ``payload_limit``: the largest payload (and checkpoint) in bytes; ``notify``: whether
    enqueues wake listening workers with NOTIFY (off behind PgBouncer, where workers poll).
    """

    def __init__(self, *, payload_limit: int = DEFAULT_PAYLOAD_LIMIT, notify: bool = True) -> None:
        if not 0 < payload_limit <= PAYLOAD_HARD_LIMIT:
            raise ConfigError(f"payload_limit must be within 1..{PAYLOAD_HARD_LIMIT}")
        self.payload_limit = payload_limit
        self.notify = notify
        self.queues: dict[str, QueueSpec] = {}
        self.tasks: dict[str, TaskSpec] = {}
        self.crons: dict[str, CronSpec] = {}
        self.on_dead: Hooks = Hooks()  # on_dead(fn): fn(notice) for every job that goes dead
        self.on_cancel: Hooks = Hooks("on_cancel")  # fn(notice) for every job cancelled
        self.maintenance_settings = MaintenanceSpec()

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
        result_ttl: float | timedelta | None = None,
        on_dependency_failure: str = "cancel",
        on_failure: str = "release",
    ) -> Callable[..., Any]:
        """Register a handler. Usable as ``@pool.task`` or ``@pool.task(queue=..., ...)``.

        ``concurrency_limit`` and ``key_rate_limit`` hold per concurrency key, cluster-wide
        (docs/limits.md); ``concurrency_key`` computes a job's key from its payload.
        ``result_ttl`` (seconds or timedelta): how long this task's finished rows, and their
        results, outlive their end before the pruning deletes them (default: the maintenance
        ``retention``).
        ``on_dependency_failure`` and ``on_failure``: what a failed parent does to a job of this
        task, and what a dead job of this task does to its sequence (docs/workflows.md).
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
                result_ttl=check_positive("result_ttl", _seconds(result_ttl), allow_none=True),
                on_dependency_failure=check_choice(
                    f"task {task_name}: on_dependency_failure",
                    on_dependency_failure,
                    DEPENDENCY_FAILURE_POLICIES,
                ),
                on_failure=check_choice(
                    f"task {task_name}: on_failure", on_failure, SEQUENCE_FAILURE_POLICIES
                ),
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
        spec.signature  # read now: a parameter no library can convert is refused at import
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
        raise ConfigError here; a queue named but not declared is refused at start
        (:meth:`validate_crons`). Without ``queue=`` it runs on ``"default"``, declared with
        default settings if it was not, as for :meth:`task`.
        """
        if callable(expression):
            raise ConfigError("use @pool.cron(expression), not bare @pool.cron")
        if queue is None:
            queue = "default"
            if queue not in self.queues:
                self.queue(queue)

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
        for name in ("retention", "audit_retention"):
            if isinstance(settings.get(name), timedelta):
                settings[name] = settings[name].total_seconds()
        self.maintenance_settings = MaintenanceSpec(**settings)
        return self.maintenance_settings

    def validate_crons(self) -> None:
        """Refuse at start a cron whose queue no worker type serves (one clear ConfigError)."""
        for spec in self.crons.values():
            if spec.queue not in self.queues:
                raise ConfigError(
                    f"cron {spec.name!r}: queue {spec.queue!r} is not declared "
                    f"(declared: {sorted(self.queues)}); add pool.queue({spec.queue!r})"
                )

    def task_spec(self, task: str | Callable[..., Any]) -> TaskSpec:
        name = getattr(task, "__workerpool_task__", task)
        if not isinstance(name, str) or name not in self.tasks:
            raise UnknownTask(f"unknown task {name!r}; registered: {sorted(self.tasks)}")
        return self.tasks[name]

    def queue_spec(self, name: str) -> QueueSpec:
        if name not in self.queues:
            raise UnknownQueue(f"unknown queue {name!r}; declared: {sorted(self.queues)}")
        return self.queues[name]

    def task_versions(self, queue: str) -> dict[str, int]:
        """What a worker of ``queue`` can run: task name → newest payload version it knows."""
        return {t.name: t.version for t in self.tasks.values() if t.queue == queue}

    def queue_tasks(self, queue: str) -> dict[str, TaskSpec]:
        """The tasks a worker of ``queue`` runs, by name."""
        return {t.name: t for t in self.tasks.values() if t.queue == queue}
