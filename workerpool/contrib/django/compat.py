"""Django's Tasks API from where this Django has it: ``django.tasks`` (Django 6 and later) or
the ``django-tasks`` backport (Django 4.2 to 5.2). The names here are the same on both."""

from __future__ import annotations

try:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # before Django 6: the backport, its exceptions named ...Error
    from django_tasks import (  # type: ignore[no-redef]
        DEFAULT_TASK_BACKEND_ALIAS,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import Task, TaskError  # type: ignore[no-redef]
    from django_tasks.exceptions import (  # type: ignore[no-redef]
        InvalidTaskBackendError as InvalidTaskBackend,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef]
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[no-redef]
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json  # type: ignore[no-redef]

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS",
    "BaseTaskBackend",
    "InvalidTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
