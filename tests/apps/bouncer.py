"""The application `tests/processes/test_pgbouncer.py` runs through PgBouncer (transaction pooling).

Every handler writes a ledger row through ``pool.engine`` (so through the bouncer too): one row
per task run, and a start/end row per cron run (database clock). The test creates the table.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from workerpool import Job, WorkerPool

CRON_SECONDS = 1.2  # longer than the one-second period: overlapping ticks must be skipped
LEDGER = (
    "CREATE TABLE bouncer_ledger (id serial PRIMARY KEY, kind text, job_id bigint,"
    " tick text, started_at timestamptz, ended_at timestamptz)"
)

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL: the bouncer's port
pool.queue("work", concurrency=8, poll_interval=0.2, drain_timeout=1, hang_timeout=10)
pool.queue("cron", poll_interval=0.1, drain_timeout=1, hang_timeout=10)
pool.maintenance(interval=0.3)


@pool.task(queue="work")
def touch(job: Job) -> None:
    """One short transaction of the handler's own: the same statement on pooled connections."""
    with pool.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO bouncer_ledger (kind, job_id, started_at)"
                " VALUES ('task', :job, clock_timestamp())"
            ),
            {"job": job.id},
        )


@pool.task(queue="work")
def waits(job: Job) -> None:
    """Waits for its cancel (it arrives by lease renewal or polling: no LISTEN here), then
    writes the moment it saw it to the file its payload names."""
    job.cancelled.wait(60)
    with open(job.payload["stamp"], "w") as out:
        out.write(repr(time.time()))


@pool.cron("* * * * * *", queue="cron", max_attempts=1)
def tick(job: Job) -> None:
    with pool.engine.begin() as conn:
        run = conn.execute(
            text(
                "INSERT INTO bouncer_ledger (kind, job_id, tick, started_at)"
                " VALUES ('cron', :job, :tick, clock_timestamp()) RETURNING id"
            ),
            {"job": job.id, "tick": job.payload["tick"]},
        ).scalar()
    time.sleep(CRON_SECONDS)
    with pool.engine.begin() as conn:
        conn.execute(
            text("UPDATE bouncer_ledger SET ended_at = clock_timestamp() WHERE id = :id"),
            {"id": run},
        )


@pool.task(queue="work")
def double(job: Job) -> int:
    """A result, and a batch's member (and callback: its payload is the batch's)."""
    return int(job.payload["n"]) * 2
