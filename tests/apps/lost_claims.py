"""An application for ``test_lost_claims.py``: a job that records each run and outlasts a restart.

``hold`` appends ``<job id> <attempt> <token>`` to ``$TEST_RUNS_FILE`` as it starts, sleeps
``payload["seconds"]`` and returns ``{"token": token}``: a done row names the run whose write
landed. Nothing else writes to the database while the jobs run (poll interval 5 s, maintenance
every 10 minutes), so the claim's commit is the last one before the test's restart.
"""

from __future__ import annotations

import os
import secrets
import time

from workerpool import Job, WorkerPool

QUEUE = "held"


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)
    pool.queue(QUEUE, concurrency=4, prefetch=0, poll_interval=5.0, hang_timeout=60.0,
               drain_timeout=1.0)
    pool.maintenance(interval=600.0)

    @pool.task(queue=QUEUE)
    def hold(job: Job) -> dict:
        token = secrets.token_hex(4)
        with open(os.environ["TEST_RUNS_FILE"], "a") as runs:
            runs.write(f"{job.id} {job.attempt} {token}\n")
        time.sleep(float(job.payload["seconds"]))
        return {"token": token}

    return pool


pool = build()
