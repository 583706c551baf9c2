"""The Django app (``"workerpool.contrib.django"`` in ``INSTALLED_APPS``): the jobs page of the
admin. The backend itself needs no app."""

from __future__ import annotations

from django.apps import AppConfig


class WorkerpoolConfig(AppConfig):
    name = "workerpool.contrib.django"
    label = "workerpool"
    verbose_name = "workerpool"
    default_auto_field = "django.db.models.BigAutoField"
