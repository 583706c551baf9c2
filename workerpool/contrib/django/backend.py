"""``WorkerpoolBackend``: Django's Tasks API on workerpool (``TASKS = {"default": {"BACKEND":
"workerpool.contrib.django.WorkerpoolBackend", "QUEUES": [...], "OPTIONS": {...}}}``).

A Django task becomes one workerpool job: its payload names the task and carries its
arguments; Django's priority is workerpool's (-100..100 of workerpool's wider range, higher
first), ``run_after`` its ``run_at``, the queue its queue. The result id is the job id.
OPTIONS (all optional): ``DATABASE`` (the Django database alias whose database holds the jobs,
default ``"default"``), ``URL`` (another database instead), ``MAX_ATTEMPTS`` (default 5: a task
that raises is retried with workerpool's backoff) and ``ENQUEUE_ON_COMMIT`` (default True).
"""

from __future__ import annotations

import inspect
import weakref
from datetime import datetime
from functools import cached_property, partial
from inspect import iscoroutinefunction
from typing import Any

from django.db import transaction
from django.utils import timezone

from ...client import WorkerPool
from ...model.errors import ConfigError, PayloadError, UnknownJob
from ...model.payload import dumps
from ...model.validation import check_max_attempts, check_name
from .compat import (
    BaseTaskBackend,
    InvalidTaskBackend,
    InvalidTaskError,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from .database import url_of
from .results import RUN_AFTER_KEY, TASK_KEY, task_as, task_result
from .runner import BACKEND_KEY, register, task_name

OPTIONS = {"DATABASE", "URL", "MAX_ATTEMPTS", "ENQUEUE_ON_COMMIT"}

#: Every backend's pool alive in this process, for :func:`dispose_pools` (a test run's end).
POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


class WorkerpoolBackend(BaseTaskBackend):
    """Enqueues Django tasks as workerpool jobs; ``workerpool run
    workerpool.contrib.django.worker:pool`` runs them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        """InvalidTaskBackend (an ImproperlyConfigured) names a bad OPTIONS entry or a queue
        name workerpool cannot take, when Django makes the backend."""
        super().__init__(alias, params)
        unknown = set(self.options) - OPTIONS
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]: unknown OPTIONS {sorted(unknown)}; known: {sorted(OPTIONS)}"
            )
        self.database = self.options.get("DATABASE", "default")
        self.enqueue_on_commit = self.options.get("ENQUEUE_ON_COMMIT", True)
        if not isinstance(self.enqueue_on_commit, bool):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]: ENQUEUE_ON_COMMIT must be True or"
                f" False, got {self.enqueue_on_commit!r}"
            )
        try:
            self.max_attempts = check_max_attempts(self.options.get("MAX_ATTEMPTS", 5))
            for queue in self.queues:
                check_name("queue", queue)
        except ConfigError as exc:
            raise InvalidTaskBackend(f"TASKS[{alias!r}]: {exc}") from None

    @cached_property
    def pool(self) -> WorkerPool:
        """The pool the jobs go to, with a handler per queue; made on first use, when Django's
        database settings are final (a test run's database included). ``QUEUES: []`` (Django's
        "any queue") declares the ``default`` queue here and each other one when first used."""
        pool = self.make_pool()
        register(pool, self.queues or {"default"}, max_attempts=self.max_attempts)
        POOLS.add(pool)
        return pool

    def make_pool(self) -> WorkerPool:
        return WorkerPool(self.options.get("URL") or url_of(self.database))

    def validate_task(self, task: Task) -> None:
        """Django's checks, then the queue name as workerpool takes it (with ``QUEUES: []``
        Django takes any)."""
        super().validate_task(task)
        try:
            check_name("queue", task.queue_name)
        except ConfigError as exc:
            raise InvalidTaskError(str(exc)) from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the job now, or when the transaction of ``DATABASE`` commits
        (``ENQUEUE_ON_COMMIT``): then the result's ``id`` is ``""`` until the commit, and stays
        so if it rolls back (nothing is enqueued). Everything is checked before: Django's
        ``TypeError``/``ValueError`` for arguments that are not JSON, ``InvalidTask`` for
        arguments the task's function cannot take or a payload workerpool refuses (a key that
        is no string, NaN, NUL, over the size limit)."""
        self.validate_task(task)
        _check_arguments(task, args, kwargs)
        result = TaskResult(
            task=task_as(task, backend=self.alias),
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,  # normalised by TaskResult: Django's own errors for what is not JSON
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        payload = self._payload(result)
        name = self._handler(task)
        write = partial(self._write, result, name, payload, self._run_at(task.run_after))
        if self.enqueue_on_commit:
            transaction.on_commit(write, using=self.database)
        else:
            write()
        return result

    def _write(
        self, result: TaskResult, name: str, payload: dict[str, Any], run_at: datetime | None
    ) -> None:
        task = result.task
        job_id = self.pool.enqueue(name, payload, priority=task.priority, run_at=run_at)
        # The row's own time, so that get_result() reads the same enqueued_at.
        created_at = self.pool.job(job_id).created_at
        object.__setattr__(result, "id", str(job_id))  # TaskResult is frozen
        object.__setattr__(result, "enqueued_at", created_at)
        task_enqueued.send(type(self), task_result=result)

    def _payload(self, result: TaskResult) -> dict[str, Any]:
        """The job's payload, checked as workerpool's enqueue will (InvalidTask if not)."""
        task = result.task
        payload = {
            TASK_KEY: task.module_path,
            BACKEND_KEY: self.alias,
            "args": result.args,
            "kwargs": result.kwargs,
        }
        if task.run_after is not None:
            payload[RUN_AFTER_KEY] = self._run_at(task.run_after).isoformat()
        try:
            dumps(payload, limit=self.pool.registry.payload_limit)
        except PayloadError as exc:
            raise InvalidTaskError(f"{task.module_path}: {exc}") from None
        return payload

    def _handler(self, task: Task) -> str:
        """The workerpool task name of ``task``'s queue, declared now if ``QUEUES`` is ``[]``."""
        is_async = iscoroutinefunction(task.func)
        name = task_name(task.queue_name, is_async=is_async)
        if name not in self.pool.registry.tasks:
            register(self.pool, {task.queue_name}, max_attempts=self.max_attempts)
        return name

    @staticmethod
    def _run_at(run_after: datetime | None) -> datetime | None:
        """An aware datetime; a naive one (``USE_TZ = False``) is in Django's TIME_ZONE."""
        if run_after is None or timezone.is_aware(run_after):
            return run_after
        return timezone.make_aware(run_after, timezone.get_default_timezone())

    def get_result(self, result_id: str) -> TaskResult:
        """The job now; TaskResultDoesNotExist for an id that names no job of a Django task
        (never enqueued, pruned after the retention, or not yet committed)."""
        job_id = _job_id(result_id)
        try:
            info = self.pool.job(job_id)
        except UnknownJob as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        return task_result(info, self.alias)


def _check_arguments(task: Task, args: Any, kwargs: Any) -> None:
    """InvalidTask for arguments the task's function cannot take: refused here, not failed in
    the worker after the commit (a ``TaskContext`` comes first for a task that takes it)."""
    try:
        signature = inspect.signature(task.func)
    except (TypeError, ValueError):  # a callable without one (a builtin): the worker will say
        return
    context = [None] if task.takes_context else []
    try:
        signature.bind(*context, *args, **kwargs)
    except TypeError as exc:
        raise InvalidTaskError(f"{task.module_path}: {exc}") from None


def dispose_pools() -> None:
    """Close every backend pool's connections (a test database cannot be dropped while a
    connection to it is open)."""
    for pool in list(POOLS):
        pool.dispose()


def _job_id(result_id: Any) -> int:
    if (
        isinstance(result_id, str)
        and result_id.isascii()
        and result_id.isdigit()
        and 0 < int(result_id) < 2**63
    ):
        return int(result_id)
    raise TaskResultDoesNotExist(f"{result_id!r} is no workerpool job id (a positive integer)")


__all__ = ["WorkerpoolBackend", "dispose_pools"]
