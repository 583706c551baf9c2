"""Running Django tasks in ``workerpool run``: one workerpool task per Django queue, whose
handler imports the Django ``Task`` by the module path in the payload and calls it.

A Django queue is a workerpool queue (one worker type, one child); its jobs have the task name
:func:`task_name` (``django:<queue>``, or ``django-async:<queue>`` for ``async def`` tasks,
which run on the worker's event loop beside each other). Django's database connections are
closed around each task, as Django's request cycle does: a worker thread may otherwise keep a
connection the database has since dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

from ...client import WorkerPool
from ...model.job import Job
from .compat import Task, TaskContext, TaskResult, TaskResultStatus, normalize_json
from .results import ASYNC_PREFIX, SYNC_PREFIX, TASK_KEY


def task_name(queue: str, *, is_async: bool) -> str:
    return f"{ASYNC_PREFIX if is_async else SYNC_PREFIX}{queue}"


def register(pool: WorkerPool, queues: set[str], *, max_attempts: int) -> None:
    """Declare on ``pool`` the handlers of the Django tasks of ``queues`` (a ConfigError names
    a queue that is no valid workerpool queue name)."""
    for queue in sorted(queues):
        pool.task(queue=queue, name=task_name(queue, is_async=False), max_attempts=max_attempts)(
            run_task
        )
        pool.task(queue=queue, name=task_name(queue, is_async=True), max_attempts=max_attempts)(
            run_async_task
        )


def run_task(job: Job) -> Any:
    """The handler of a sync Django task: its return value is the job's result."""
    task = _task(job)
    close_old_connections()
    try:
        return normalize_json(task.func(*_arguments(task, job), **job.payload["kwargs"]))
    finally:
        close_old_connections()


async def run_async_task(job: Job) -> Any:
    """The handler of an ``async def`` Django task, on the worker's event loop."""
    task = _task(job)
    return normalize_json(await task.func(*_arguments(task, job), **job.payload["kwargs"]))


def _task(job: Job) -> Task:
    task = import_string(job.payload[TASK_KEY])
    if not isinstance(task, Task):
        raise TypeError(f"{job.payload[TASK_KEY]!r} is not a Django Task")
    return task


def _arguments(task: Task, job: Job) -> list[Any]:
    """The positional arguments, the ``TaskContext`` first for a task that takes it."""
    args = list(job.payload["args"])
    return [_context(task, job), *args] if task.takes_context else args


def _context(task: Task, job: Job) -> TaskContext:
    """The running attempt as Django's ``TaskContext``: ``context.attempt`` is workerpool's
    ``job.attempt`` (earlier attempts' workers are in ``get_result``'s ``worker_ids``)."""
    now = datetime.now(UTC)
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=job.payload["args"],
        kwargs=job.payload["kwargs"],
        backend=task.backend,
        errors=[],
        worker_ids=[job.worker] * job.attempt,
    )
    return TaskContext(task_result=result)


__all__ = ["ASYNC_PREFIX", "SYNC_PREFIX", "register", "run_async_task", "run_task", "task_name"]
