"""workerpool's jobs table as an unmanaged, read-only Django model, for the admin's jobs page.

Unmanaged: Django never creates, alters or drops it (workerpool's migrations own the table), and
only the columns an operator reads are named here. Writes go through workerpool (the dashboard
or the command line), never through this model: the admin offers none.
"""

from __future__ import annotations

from django.db import models

from .results import ASYNC_PREFIX, SYNC_PREFIX


class Job(models.Model):
    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    state = models.TextField()
    dead_reason = models.TextField(null=True)
    priority = models.SmallIntegerField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    payload = models.JSONField()
    result = models.JSONField(null=True)
    errors = models.JSONField()
    created_at = models.DateTimeField()
    run_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = "workerpool_jobs"
        ordering = ("-id",)
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} ({self.task}, {self.state})"

    @property
    def django_task(self) -> str:
        """The Django task a job runs (its payload's module path), or "" for other jobs."""
        if not self.task.startswith((SYNC_PREFIX, ASYNC_PREFIX)):
            return ""
        path = self.payload.get("task") if isinstance(self.payload, dict) else None
        return path if isinstance(path, str) else ""
