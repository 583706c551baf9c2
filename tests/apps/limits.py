"""An application with limits, for the process tests of global, per-key and rate limits.

Every handler writes a ledger row (database clock) when it starts and when it ends, so a test
can tell what ran at the same time from the handlers' own account.
"""

from __future__ import annotations

import os
import time

from sqlalchemy import text

from workerpool import Job, WorkerPool

SHORT = {"drain_timeout": 1.0, "hang_timeout": 5.0, "poll_interval": 0.05}
LEDGER = (
    "CREATE TABLE limits_ledger (id serial PRIMARY KEY, job_id bigint, key text, pid int,"
    " started_at timestamptz, ended_at timestamptz)"
)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    # one handler thread per replica: three replicas could run 3, the limit lets 2
    pool.queue("capped", concurrency=1, global_concurrency=2, **SHORT)
    pool.queue("keyed", concurrency=8, **SHORT)
    pool.queue("rated", concurrency=8, rate_limit="50/s", **SHORT)

    def run(job: Job, key: str | None = None) -> None:
        with pool.engine.begin() as conn:
            row = conn.execute(
                text(
                    "INSERT INTO limits_ledger (job_id, key, pid, started_at)"
                    " VALUES (:job, :key, :pid, clock_timestamp()) RETURNING id"
                ),
                {"job": job.id, "key": key, "pid": os.getpid()},
            ).scalar()
        time.sleep(job.payload.get("seconds", 0))
        with pool.engine.begin() as conn:
            conn.execute(
                text("UPDATE limits_ledger SET ended_at = clock_timestamp() WHERE id = :row"),
                {"row": row},
            )

    @pool.task(queue="capped", max_attempts=10)
    def hold(job: Job) -> None:
        run(job)

    @pool.task(
        queue="keyed",
        concurrency_limit=1,
        concurrency_key=lambda payload: f"account:{payload['account']}",
    )
    def serial(job: Job) -> None:
        run(job, f"account:{job.payload['account']}")

    @pool.task(queue="rated")
    def tick(job: Job) -> None:
        return None

    return pool


pool = build()
