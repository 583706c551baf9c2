"""From a workerpool job (:class:`~workerpool.model.results.JobInfo`) to Django's ``TaskResult``.

A job's payload is ``{"task": <module path>, "args": [...], "kwargs": {...}}`` (see
:mod:`.runner`); the rest of the result is the row: states, times, errors and attempts.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
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

#: The task path in a payload; beside it, the ``run_after`` the task was enqueued with (ISO
#: 8601, absent when none): the row's ``run_at`` moves with each retry's backoff.
TASK_KEY = "task"
RUN_AFTER_KEY = "run_after"
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
    """Django's view of the job now, as the backend ``alias`` reads it: the result's task is
    the enqueued one (its queue, priority and ``run_after``) on that backend, so that
    ``refresh()`` reads the same database again."""
    payload = info.payload
    task = task_as(
        task_of(info),
        priority=info.priority,
        queue_name=info.queue,
        run_after=run_after_of(payload),
        backend=alias,
    )
    result = TaskResult(
        task=task,
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


def task_as(task: Task, **changes: Any) -> Task:
    """``task`` with ``changes``, made without ``Task.__post_init__``: that validates against
    the backend the task names, whose queues may not be those of the backend reading it (the
    job was validated when it was enqueued)."""
    if all(getattr(task, name) == value for name, value in changes.items()):
        return task
    copy = object.__new__(type(task))
    for field in fields(task):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
    return copy


def run_after_of(payload: dict[str, Any]) -> datetime | None:
    value = payload.get(RUN_AFTER_KEY)
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def worker_ids(info: JobInfo) -> list[str]:
    """One worker per attempt made: those that failed (the error history), then the latest
    claimant if its attempt is running or succeeded. A cancel's entry names no worker: a job
    cancelled before it ran made no attempt."""
    ids = [
        str(entry["worker"]) for entry in info.errors if "attempt" in entry and entry.get("worker")
    ]
    if info.claimed_by and info.state in (JobState.PROCESSING, JobState.DONE):
        ids.append(info.claimed_by)
    return ids


def task_error(entry: dict[str, Any]) -> TaskError:
    """An error entry as Django's ``TaskError``."""
    return TaskError(exception_class_path=exception_path(entry), traceback=entry["traceback"])


def exception_path(entry: dict[str, Any]) -> str:
    """The exception's dotted path: the entry's ``class``; an entry written before it had one
    is read from the traceback, whose exception line is ``module.Class: message`` (the class
    alone for builtins), the last line that starts so: a message of several lines or a note
    comes after it."""
    if isinstance(entry.get("class"), str):
        return entry["class"]
    name = str(entry.get("type", "Exception"))
    for line in reversed(entry["traceback"].splitlines()):
        head = line.split(":", 1)[0]
        if head == name:
            return f"builtins.{name}"
        if head.endswith(f".{name}") and " " not in head and not line.startswith(" "):
            return head
    return f"builtins.{name}"


__all__ = [
    "ASYNC_PREFIX",
    "RUN_AFTER_KEY",
    "STATUSES",
    "SYNC_PREFIX",
    "TASK_KEY",
    "task_as",
    "task_of",
    "task_result",
]
