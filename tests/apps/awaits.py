"""The application of the await tests under `workerpool run`: one queue of one slot, where a
parent enqueues its child in a step and awaits it. Each run writes a ledger row (in its own
transaction) saying what it did, on which attempt and when (``LEDGER``, made by the test)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from sqlalchemy import text

from workerpool import Job, JobFailed, Permanent, WorkerPool

SHORT = {
    "drain_timeout": 1.0,
    "hang_timeout": float(os.environ.get("TEST_HANG", "10")),
    "poll_interval": 0.1,
}
LEDGER = (
    "CREATE TABLE await_ledger (job_id bigint, what text, attempt int, value jsonb,"
    " at timestamptz DEFAULT clock_timestamp())"
)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("one", concurrency=1, **SHORT)

    @pool.task(queue="one", max_attempts=5)
    def child(job: Job) -> dict[str, int]:
        _note(pool, job, "child_start")
        time.sleep(job.payload.get("sleep", 0))
        if job.payload.get("fail"):
            raise Permanent("the child gives up")
        _note(pool, job, "child_end")
        return {"doubled": job.payload["n"] * 2}

    @pool.task(queue="one", max_attempts=5)
    def parent(job: Job) -> dict[str, Any]:
        # the key: a spawn that ran but was not recorded (killed in between) finds its child
        spawn = lambda: pool.enqueue("child", job.payload, key=f"child-of:{job.id}")  # noqa: E731
        spawned = job.step("spawn", spawn)
        _note(pool, job, "parent_run")
        try:
            got: Any = job.wait_for_job(spawned)
        except JobFailed as failed:
            got = {"failed": failed.reason}
        _note(pool, job, "parent_end", got)
        return {"child": spawned, "got": got}

    return pool


def _note(pool: WorkerPool, job: Job, what: str, value: Any = None) -> None:
    with pool.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO await_ledger (job_id, what, attempt, value)"
                " VALUES (:id, :what, :attempt, CAST(:value AS jsonb))"
            ),
            {"id": job.id, "what": what, "attempt": job.attempt, "value": json.dumps(value)},
        )


pool = build()
