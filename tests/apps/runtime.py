"""A small application for the worker runtime's real-process tests
(tests/processes/test_worker_process.py).

The database URL comes from ``$WORKERPOOL_DATABASE_URL``; queue timings from ``$RUNTIME_APP_*``;
``$RUNTIME_RECYCLE_GRACE`` shortens the grace a timed-out handler gets before its process is
recycled (set at import, so forked children of `workerpool run` inherit it).
"""

from __future__ import annotations

import os
import time

from workerpool import Job, WorkerPool
from workerpool.runtime.worker import timeouts

timeouts.RECYCLE_GRACE = float(os.environ.get("RUNTIME_RECYCLE_GRACE", timeouts.RECYCLE_GRACE))

pool = WorkerPool()
pool.queue(
    "work",
    concurrency=int(os.environ.get("RUNTIME_APP_CONCURRENCY", "4")),
    poll_interval=float(os.environ.get("RUNTIME_APP_POLL", "0.05")),
    drain_timeout=2.0,
    hang_timeout=10.0,
)


@pool.task(queue="work", max_attempts=10)
def nap(job: Job) -> None:
    """Sleep ``payload["seconds"]``: a job that outlives database trouble."""
    time.sleep(job.payload.get("seconds", 0.1))


@pool.task(queue="work", max_attempts=3)
def resumable(job: Job) -> None:
    """Step 1 saves a checkpoint then hangs (until killed); a later attempt records where it
    resumed from and finishes."""
    if job.checkpoint_data is None:
        job.checkpoint({"step": 1})
        time.sleep(3600)
    job.checkpoint({"step": 2, "resumed_from": job.checkpoint_data, "attempt": job.attempt})


@pool.task(queue="work", timeout=0.3, max_attempts=3)
def stuck(job: Job) -> None:
    """Ignores its timeout: only a recycle of the process gets rid of it."""
    while True:
        time.sleep(1)
