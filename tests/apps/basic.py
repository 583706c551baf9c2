"""A small application for the supervisor tests: short timings, handlers with known behaviour.

Timings come from the environment so that a test can stretch one of them:
``TEST_DRAIN`` (drain_timeout, default 1 s), ``TEST_HANG`` (hang_timeout, default 2 s).
"""

from __future__ import annotations

import os
import time

from workerpool import Job, WorkerPool

DRAIN = float(os.environ.get("TEST_DRAIN", "1"))
HANG = float(os.environ.get("TEST_HANG", "2"))
SHORT = {"drain_timeout": DRAIN, "hang_timeout": HANG, "poll_interval": 0.1}

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL
pool.queue("fast", concurrency=4, **SHORT)
pool.queue("slow", concurrency=2, **SHORT)


@pool.task(queue="fast")
def quick(job: Job) -> None:
    """Sleeps ``seconds`` (default 0.2)."""
    time.sleep(job.payload.get("seconds", 0.2))


@pool.task(queue="slow", max_attempts=5)
def steps(job: Job) -> None:
    """``n`` steps of ``step`` seconds; saves a checkpoint after each, resumes from the last."""
    done = (job.checkpoint_data or {}).get("done", 0)
    for index in range(done, job.payload["n"]):
        time.sleep(job.payload.get("step", 0.1))
        job.checkpoint({"done": index + 1})
