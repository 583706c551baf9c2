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

from datetime import datetime
from functools import cached_property, partial
from inspect import iscoroutinefunction
from typing import Any

from django.db import transaction
from django.utils import timezone

from ...client import WorkerPool
from ...model.errors import ConfigError, UnknownJob
from ...model.validation import check_max_attempts, check_name
from .compat import (
    BaseTaskBackend,
    InvalidTaskBackend,
    InvalidTaskError,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from .database import url_of
from .results import TASK_KEY, task_result
from .runner import register, task_name

OPTIONS = {"DATABASE", "URL", "MAX_ATTEMPTS", "ENQUEUE_ON_COMMIT"}


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
        database settings are final (a test run's database included)."""
        pool = WorkerPool(self.options.get("URL") or url_of(self.database))
        register(pool, self.queues, max_attempts=self.max_attempts)
        return pool

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the job now, or when the transaction of ``DATABASE`` commits
        (``ENQUEUE_ON_COMMIT``): then the result's ``id`` is ``""`` until the commit, and stays
        so if it rolls back (nothing is enqueued)."""
        self.validate_task(task)
        payload = self._payload(task, args, kwargs)
        options = self._options(task)
        result = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        write = partial(self._write, result, payload, options)
        if self.enqueue_on_commit:
            transaction.on_commit(write, using=self.database)
        else:
            write()
        return result

    def _write(self, result: TaskResult, payload: dict[str, Any], options: dict[str, Any]) -> None:
        job_id = self.pool.enqueue(options.pop("name"), payload, **options)
        object.__setattr__(result, "id", str(job_id))  # TaskResult is frozen
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)

    def _payload(self, task: Task, args: Any, kwargs: Any) -> dict[str, Any]:
        """The job's payload; InvalidTaskError names arguments that are not JSON."""
        try:
            return {
                TASK_KEY: task.module_path,
                "args": normalize_json(list(args)),
                "kwargs": normalize_json(dict(kwargs)),
            }
        except (TypeError, ValueError) as exc:
            raise InvalidTaskError(f"{task.module_path}: arguments must be JSON: {exc}") from None

    def _options(self, task: Task) -> dict[str, Any]:
        return {
            "name": task_name(task.queue_name, is_async=iscoroutinefunction(task.func)),
            "priority": task.priority,
            "run_at": self._run_at(task.run_after),
        }

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


def _job_id(result_id: Any) -> int:
    if (
        isinstance(result_id, str)
        and result_id.isascii()
        and result_id.isdigit()
        and 0 < int(result_id) < 2**63
    ):
        return int(result_id)
    raise TaskResultDoesNotExist(f"{result_id!r} is no workerpool job id (a positive integer)")


__all__ = ["WorkerpoolBackend"]
