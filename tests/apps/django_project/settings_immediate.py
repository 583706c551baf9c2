"""The project with Django's ImmediateBackend as its default: ``workerpool run`` refuses it."""

from __future__ import annotations

from .settings import *  # noqa: F403
from .settings import _BACKPORT

TASKS = {
    "default": {
        "BACKEND": "django.tasks.backends.immediate.ImmediateBackend"
        if not _BACKPORT
        else "django_tasks.backends.immediate.ImmediateBackend"
    }
}
