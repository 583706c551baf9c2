"""``task`` from Django 6's ``django.tasks`` or, before it, the ``django-tasks`` backport."""

from __future__ import annotations

try:
    from django.tasks import default_task_backend, task
except ImportError:
    from django_tasks import default_task_backend, task  # type: ignore[no-redef]

__all__ = ["default_task_backend", "task"]
