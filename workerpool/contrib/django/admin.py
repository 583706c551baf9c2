"""The admin's jobs page: workerpool's jobs, newest first, filtered by state and queue, read
only. It reads the database of the ``default`` task backend's ``DATABASE`` (Django's
``default`` without one)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from .models import Job


def jobs_database() -> str:
    from django.conf import settings

    options = getattr(settings, "TASKS", {}).get("default", {}).get("OPTIONS", {})
    return str(options.get("DATABASE", "default"))


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "task",
        "django_task",
        "queue",
        "state",
        "priority",
        "attempts",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "queue")
    search_fields = ("task",)
    readonly_fields = tuple(field.name for field in Job._meta.fields)
    show_full_result_count = False  # a count(*) of a large jobs table on every page is costly

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(jobs_database())

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
