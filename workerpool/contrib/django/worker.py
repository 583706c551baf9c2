"""The target of ``workerpool run workerpool.contrib.django.worker:pool``: sets Django up
(``$DJANGO_SETTINGS_MODULE``) and serves the queues of the ``default`` task backend.

Django is set up here, in the supervisor, before it forks: its apps and settings load once, and
no database connection is open yet, so each child opens its own. A project with several
workerpool backends serves another one with a module of its own:
``pool = workerpool.contrib.django.worker.pool_of("other")``.
"""

from __future__ import annotations

import django
from django.core.exceptions import ImproperlyConfigured

from ...client import WorkerPool
from .backend import WorkerpoolBackend
from .compat import DEFAULT_TASK_BACKEND_ALIAS, task_backends


def pool_of(alias: str = DEFAULT_TASK_BACKEND_ALIAS) -> WorkerPool:
    """The pool of the task backend ``alias``, which must be a WorkerpoolBackend."""
    backend = task_backends[alias]
    if not isinstance(backend, WorkerpoolBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is {type(backend).__name__}, not"
            " workerpool.contrib.django.WorkerpoolBackend: workerpool run has nothing to run"
        )
    return backend.pool


django.setup()
pool = pool_of()

__all__ = ["pool", "pool_of"]
