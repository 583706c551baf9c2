"""The application of the workflow tests under `workerpool run`: each run of a step writes down
(in its own transaction, before it returns) which job ran, on which attempt, when, and which
parents' results it saw, in a ledger table (``LEDGER``, made by the test)."""

from __future__ import annotations

import json
import os

from sqlalchemy import text

from workerpool import Job, WorkerPool

SHORT = {
    "drain_timeout": 1.0,
    "hang_timeout": float(os.environ.get("TEST_HANG", "10")),
    "poll_interval": 0.1,
}
LEDGER = (
    "CREATE TABLE flow_ledger (job_id bigint, attempt int, parents jsonb, sequence text,"
    " started timestamptz, ended timestamptz DEFAULT clock_timestamp())"
)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("flow", concurrency=4, **SHORT)

    @pool.task(queue="flow", max_attempts=10)
    def step(job: Job) -> dict[str, int]:
        started = _now(pool)
        parents = {str(k): v for k, v in job.parent_results.items()}
        with pool.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO flow_ledger (job_id, attempt, parents, sequence,"
                    " started) VALUES (:id, :attempt, CAST(:parents AS jsonb), :seq,"
                    " :started)"
                ),
                {
                    "id": job.id,
                    "attempt": job.attempt,
                    "parents": json.dumps(parents),
                    "seq": job.payload.get("sequence"),
                    "started": started,
                },
            )
        return {"n": job.payload.get("n", 0)}

    return pool


def _now(pool: WorkerPool):
    with pool.engine.connect() as conn:
        return conn.execute(text("SELECT clock_timestamp()")).scalar()


pool = build()
