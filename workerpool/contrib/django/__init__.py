"""Django's Tasks framework on workerpool (docs/recipes/django.md).

``TASKS = {"default": {"BACKEND": "workerpool.contrib.django.WorkerpoolBackend"}}``; run the
tasks with ``workerpool run workerpool.contrib.django.worker:pool``; add
``"workerpool.contrib.django"`` to ``INSTALLED_APPS`` for the read-only jobs page in the admin.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WorkerpoolBackend", "complete_in", "step"]


def __getattr__(name: str) -> Any:
    # Lazy: Django imports this package while it loads its apps, before the Tasks API may be
    # imported; the backend is resolved later, by TASKS.
    if name == "WorkerpoolBackend":
        from .backend import WorkerpoolBackend

        return WorkerpoolBackend
    if name in {"complete_in", "step"}:
        from . import once

        return getattr(once, name)
    raise AttributeError(name)
