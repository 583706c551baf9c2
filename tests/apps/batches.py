"""The application of the batch tests under `workerpool run`: tiny members, and a callback that
records what it saw of its batch in a ledger table (``LEDGER``, made by the test)."""

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
    "CREATE TABLE batch_ledger (batch_id bigint, task text, live int, total int,"
    " done int, at timestamptz DEFAULT clock_timestamp())"
)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("members", concurrency=8, **SHORT)
    pool.queue("reports", concurrency=1, **SHORT)

    @pool.task(queue="members")
    def member(job: Job) -> int:
        return int(job.payload["n"]) * 2

    @pool.task(queue="reports")
    def report(job: Job) -> dict[str, int]:
        """The callback: what its batch looks like when it runs, written down once per run."""
        assert job.batch_id is not None
        status = pool.batch_status(job.batch_id)
        with pool.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO batch_ledger (batch_id, task, live, total, done)"
                    " VALUES (:b, :t, :live, :total, :done)"
                ),
                {
                    "b": job.batch_id,
                    "t": job.task,
                    "live": status.live,
                    "total": status.total,
                    "done": status.done,
                },
            )
        return {"total": status.total, "done": status.done}

    return pool


pool = build()
