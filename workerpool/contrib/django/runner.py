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
from traceback import format_exception
from typing import Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

from ...client import WorkerPool
from ...model.errors import Permanent
from ...model.job import Job
from .compat import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .once import RUNNING
from .results import ASYNC_PREFIX, SYNC_PREFIX, TASK_KEY, run_after_of, task_as

#: The payload's backend alias: the task result a running task sees names it.
BACKEND_KEY = "backend"


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
    """The handler of a sync Django task: its return value is the job's result. Django's
    ``task_started`` and ``task_finished`` are sent around it, as Django's own backends do."""
    task, running = _start(job)
    close_old_connections()
    current = RUNNING.set(job)  # complete_in and step reach the job through it
    try:
        value = normalize_json(task.func(*_arguments(task, running), **job.payload["kwargs"]))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _finish(running, job, exc)  # in the handler: Django's log line carries the traceback
        raise
    finally:
        RUNNING.reset(current)
        close_old_connections()
    _finish(running, job, None)
    return value


async def run_async_task(job: Job) -> Any:
    """The handler of an ``async def`` Django task, on the worker's event loop."""
    task, running = _start(job)
    current = RUNNING.set(job)  # copied into sync_to_async's thread with the context
    try:
        value = normalize_json(await task.func(*_arguments(task, running), **job.payload["kwargs"]))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _finish(running, job, exc)
        raise
    finally:
        RUNNING.reset(current)
    _finish(running, job, None)
    return value


def _start(job: Job) -> tuple[Task, TaskResult]:
    task = import_string(job.payload[TASK_KEY])
    if not isinstance(task, Task):
        raise TypeError(f"{job.payload[TASK_KEY]!r} is not a Django Task")
    running = _running(task, job)
    task_started.send(sender=_sender(running), task_result=running)
    return task, running


def _arguments(task: Task, running: TaskResult) -> list[Any]:
    """The positional arguments, the ``TaskContext`` first for a task that takes it."""
    args = list(running.args)
    return [TaskContext(task_result=running), *args] if task.takes_context else args


def _running(task: Task, job: Job) -> TaskResult:
    """The running attempt as Django's ``TaskResult``: the task as enqueued (queue, priority,
    run_after, backend), ``attempts`` workerpool's ``job.attempt`` (earlier attempts' workers
    are in ``get_result``'s ``worker_ids``)."""
    now = datetime.now(UTC)
    payload = job.payload
    enqueued = task_as(
        task,
        priority=job.priority,
        queue_name=job.queue,
        run_after=run_after_of(payload),
        backend=payload.get(BACKEND_KEY, task.backend),
    )
    return TaskResult(
        task=enqueued,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=enqueued.backend,
        errors=[],
        worker_ids=[job.worker] * job.attempt,
    )


def _finish(running: TaskResult, job: Job, exc: BaseException | None) -> None:
    """``task_finished`` for this attempt: SUCCESSFUL, FAILED when no retry follows, READY
    (with the error) when workerpool will retry it."""
    if exc is None:
        status = TaskResultStatus.SUCCESSFUL
    else:
        path = f"{type(exc).__module__}.{type(exc).__qualname__}"
        running.errors.append(
            TaskError(exception_class_path=path, traceback="".join(format_exception(exc)))
        )
        last = isinstance(exc, Permanent) or job.attempt >= job.max_attempts
        status = TaskResultStatus.FAILED if last else TaskResultStatus.READY
    object.__setattr__(running, "status", status)
    if status != TaskResultStatus.READY:
        object.__setattr__(running, "finished_at", datetime.now(UTC))
    task_finished.send(sender=_sender(running), task_result=running)


def _sender(running: TaskResult) -> type:
    """The class of the backend the task was enqueued on, as Django's backends send; the base
    class when this process has no such alias."""
    try:
        return type(task_backends[running.backend])
    except Exception:  # InvalidTaskBackend, or the backend's own settings error
        return BaseTaskBackend


__all__ = [
    "ASYNC_PREFIX",
    "BACKEND_KEY",
    "SYNC_PREFIX",
    "register",
    "run_async_task",
    "run_task",
    "task_name",
]
