"""An app for schedules added at run time: one task, no declared cron (tests of `workerpool cron
add` name it with ``--app``; `workerpool run` of it schedules only what was added)."""

from __future__ import annotations

import os

from sqlalchemy import text

from workerpool import Job, WorkerPool

SHORT = {
    "drain_timeout": 1.0,
    "hang_timeout": float(os.environ.get("TEST_HANG", "10")),
    "poll_interval": 0.1,
}
LEDGER = (
    "CREATE TABLE cron_ledger (name text, tick text, job_id bigint,"
    " at timestamptz DEFAULT clock_timestamp())"
)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("q", **SHORT)

    @pool.task(queue="q")
    def digest(job: Job) -> dict:
        if job.payload.get("ledger"):
            with pool.engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO cron_ledger (name, tick, job_id)"
                        " VALUES (:name, :tick, :job_id)"
                    ),
                    {"name": job.payload["ledger"], "tick": job.payload["tick"], "job_id": job.id},
                )
        return job.payload

    return pool


pool = build()
