"""Django's two reference backends as WorkerpoolBackends: the names Django's own tests use."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from workerpool import WorkerPool
from workerpool.contrib.django import WorkerpoolBackend
from workerpool.contrib.django.compat import TaskResult
from workerpool.contrib.django.database import url_of
from workerpool.testing.runner import drain

#: Schemas migrated in this process: Django's tests make a backend per settings override.
MIGRATED: set[tuple[str, str]] = set()


class ContractBackend(WorkerpoolBackend):
    """Writes at once (Django's reference backends never wait for a commit; Django's tests
    check that), in a schema of its own: each reference backend starts from empty tables."""

    schema = "public"

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.enqueue_on_commit = False  # not an OPTION: Django's tests read OPTIONS as {}
        self.max_attempts = 1  # a task that raises is FAILED at once, as Django's tests read

    def make_pool(self) -> WorkerPool:
        pool = WorkerPool(url_of(self.database), schema=self.schema)
        key = (pool.url.render_as_string(hide_password=False), self.schema)
        if key not in MIGRATED:
            pool.migrate()
            MIGRATED.add(key)
        return pool

    def job_ids(self) -> list[int]:
        with self.pool.engine.connect() as conn:
            return list(conn.scalars(text("SELECT id FROM workerpool_jobs ORDER BY id")))


class DummyBackend(ContractBackend):
    """Django's DummyBackend: the jobs wait (no worker serves this schema); ``results`` and
    ``clear()`` are the dummy's own test helpers, over the table."""

    schema = "contract_dummy"

    @property
    def results(self) -> list[TaskResult]:
        return [self.get_result(str(job_id)) for job_id in self.job_ids()]

    def clear(self) -> None:
        with self.pool.engine.begin() as conn:
            conn.execute(text("DELETE FROM workerpool_jobs"))


class ImmediateBackend(ContractBackend):
    """Django's ImmediateBackend: the job runs inside ``enqueue()``, and the result returned is
    the row's once it has run."""

    schema = "contract_immediate"

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        result = super().enqueue(task, args, kwargs)
        drain(self.pool, task.queue_name)
        return self.get_result(result.id)
