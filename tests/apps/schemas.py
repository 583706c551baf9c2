"""The application `tests/integration/test_schema_option.py` runs twice, once per schema.

Its pool takes its schema from ``$WORKERPOOL_SCHEMA``; each handler returns the schema its own
connection (``pool.engine``, made in the child) is in, so a test reads from a job's result where
it ran; the cron ticks every second into the same queue.
"""

from __future__ import annotations

from sqlalchemy import text

from workerpool import Job, WorkerPool

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL and $WORKERPOOL_SCHEMA
pool.queue("q", concurrency=2, poll_interval=0.1, drain_timeout=1, hang_timeout=10)
pool.maintenance(interval=0.3)


def _where() -> str:
    with pool.engine.connect() as conn:
        return str(conn.execute(text("SELECT current_schema()")).scalar())


@pool.task(queue="q")
def where(job: Job) -> str:
    return _where()


@pool.cron("* * * * * *", queue="q", max_attempts=1)
def tick(job: Job) -> str:
    return _where()
