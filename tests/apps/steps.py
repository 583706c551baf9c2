"""The application of the step tests under `workerpool run`: a four-step job whose steps write
to a ledger table (``LEDGER``, made by the test), and which stops after step 2 on its first
attempt (to be SIGKILLed there); and a job that waits for a signal."""

from __future__ import annotations

import os
import time

from sqlalchemy import text

from workerpool import Backoff, Job, WorkerPool

SHORT = {
    "drain_timeout": 1.0,
    "hang_timeout": float(os.environ.get("TEST_HANG", "10")),
    "poll_interval": 0.1,
}
LEDGER = (
    "CREATE TABLE step_ledger (job_id bigint, step text, attempt int,"
    " at timestamptz DEFAULT clock_timestamp())"
)
STEPS = ("charge", "receipt", "crm", "archive")


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("flows", concurrency=2, **SHORT)

    def effect(job: Job, step: str) -> str:
        with pool.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO step_ledger (job_id, step, attempt) VALUES (:j, :s, :a)"),
                {"j": job.id, "s": step, "a": job.attempt},
            )
        return f"{step} ok"

    @pool.task(queue="flows", backoff=Backoff(base=0, cap=0))
    def four_steps(job: Job) -> list[str]:
        done = []
        for number, step in enumerate(STEPS, start=1):
            done.append(job.step(step, lambda step=step: effect(job, step)))
            if number == 2 and job.attempt == 1:
                time.sleep(120)  # the test SIGKILLs this process here
        return done

    @pool.task(queue="flows")
    def approval(job: Job) -> dict:
        approved = job.wait_for(f"approved:{job.payload['order']}", timeout=600)
        return {"approved": approved}

    return pool


pool = build()
