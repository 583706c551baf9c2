"""From a workerpool job (:class:`~workerpool.model.results.JobInfo`) to Django's ``TaskResult``.

A job's payload is ``{"task": <module path>, "args": [...], "kwargs": {...}}`` (see
:mod:`.runner`); the rest of the result is the row: states, times, errors and attempts.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

from ...model.results import JobInfo
from ...model.states import JobState
from .compat import Task, TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus

#: workerpool's states as Django sees them. ``failed`` waits for its retry: Django's READY is
#: "ready to be executed again"; ``dead`` (retries exhausted, or Permanent) and ``cancelled``
#: will not run again.
STATUSES = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.WAITING: TaskResultStatus.READY,
    JobState.FAILED: TaskResultStatus.READY,
    JobState.PROCESSING: TaskResultStatus.RUNNING,
    JobState.DONE: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}

#: The task path in a payload.
TASK_KEY = "task"
#: The workerpool task names of Django's tasks start so (:func:`.runner.task_name`).
SYNC_PREFIX = "django:"
ASYNC_PREFIX = "django-async:"


def task_of(info: JobInfo) -> Task:
    """The ``Task`` the job runs, imported by its module path; TaskResultDoesNotExist when the
    job is not a Django task's (another task of the same pool) or its task is gone."""
    payload = info.payload if isinstance(info.payload, dict) else {}
    path = payload.get(TASK_KEY)
    if not info.task.startswith((SYNC_PREFIX, ASYNC_PREFIX)) or not isinstance(path, str):
        raise TaskResultDoesNotExist(f"job {info.id} is not a Django task's")
    try:
        task = import_string(path)
    except ImportError as exc:
        raise TaskResultDoesNotExist(
            f"job {info.id}: task {path!r} cannot be imported: {exc}"
        ) from None
    if not isinstance(task, Task):
        raise TaskResultDoesNotExist(f"job {info.id}: {path!r} is not a Task")
    return task


def task_result(info: JobInfo, alias: str) -> TaskResult:
    """Django's view of the job now."""
    payload = info.payload
    result = TaskResult(
        task=task_of(info).using(priority=info.priority, queue_name=info.queue),
        id=str(info.id),
        status=STATUSES[JobState(info.state)],
        enqueued_at=info.created_at,
        # workerpool keeps the latest claim's time only: for a first attempt both are exact
        started_at=info.claimed_at,
        last_attempted_at=info.claimed_at,
        finished_at=info.finished_at if info.finished else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=[task_error(entry) for entry in info.errors if entry.get("traceback")],
        worker_ids=worker_ids(info),
    )
    if info.state == JobState.DONE:
        object.__setattr__(result, "_return_value", info.result)  # TaskResult is frozen
    return result


def worker_ids(info: JobInfo) -> list[str]:
    """One worker per attempt made: those that failed (the error history), then the latest
    claimant if its attempt is running or succeeded."""
    ids = [str(entry.get("worker", "")) for entry in info.errors if "attempt" in entry]
    if info.claimed_by and info.state in (JobState.PROCESSING, JobState.DONE):
        ids.append(info.claimed_by)
    return ids


def task_error(entry: dict[str, Any]) -> TaskError:
    """An error entry as Django's ``TaskError``: the exception's dotted path is read from the
    traceback's last line, where Python writes ``module.Class`` (builtins without a module);
    the entry's ``type`` keeps only the class name."""
    return TaskError(exception_class_path=exception_path(entry), traceback=entry["traceback"])


def exception_path(entry: dict[str, Any]) -> str:
    name = str(entry.get("type", "Exception"))
    last = entry["traceback"].rstrip("\n").rsplit("\n", 1)[-1]
    head = last.split(":", 1)[0].strip()
    if head.endswith(name) and "." in head and " " not in head:
        return head
    return f"builtins.{name}"


__all__ = ["ASYNC_PREFIX", "STATUSES", "SYNC_PREFIX", "TASK_KEY", "task_of", "task_result"]
