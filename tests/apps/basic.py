"""A small application for the supervisor tests: short timings, handlers with known behaviour.

Timings come from the environment so that a test can stretch one of them:
``TEST_DRAIN`` (drain_timeout, default 1 s), ``TEST_HANG`` (hang_timeout, default 5 s: a child
that boots slowly on a loaded machine, with tests running in parallel, is not taken for hung).
"""

from __future__ import annotations

import os
import re
import time

from workerpool import Backoff, Job, WorkerPool

DRAIN = float(os.environ.get("TEST_DRAIN", "1"))
HANG = float(os.environ.get("TEST_HANG", "5"))
SHORT = {"drain_timeout": DRAIN, "hang_timeout": HANG, "poll_interval": 0.1}


def build(url: object = None) -> WorkerPool:
    """The application's pool (tests build one on their database to enqueue and inspect)."""
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("fast", concurrency=4, **SHORT)
    pool.queue("slow", concurrency=2, **SHORT)

    @pool.task(queue="fast")
    def quick(job: Job) -> None:
        """Sleeps ``seconds`` (default 0.2)."""
        time.sleep(job.payload.get("seconds", 0.2))

    @pool.task(queue="slow", max_attempts=5)
    def steps(job: Job) -> None:
        """``n`` steps of ``step`` seconds; checkpoints after each and resumes from the last.

        The checkpoint records where this attempt started, so a test can see a resume.
        """
        done = (job.checkpoint_data or {}).get("done", 0)
        for index in range(done, job.payload["n"]):
            time.sleep(job.payload.get("step", 0.1))
            job.checkpoint({"done": index + 1, "resumed_from": done})

    @pool.task(queue="fast", max_attempts=1)
    def hog(job: Job) -> None:
        """Holds the GIL in C code for minutes: the child's loop starves and stops ticking.

        It saves a checkpoint first, so that a test can tell it has begun."""
        job.checkpoint({"begun": True})
        re.match(r"(a+)+$", "a" * 32 + "!")

    @pool.task(queue="fast", max_attempts=3, backoff=Backoff(base=0.5, jitter=0))
    def flaky(job: Job) -> str:
        """Raises on its first ``fail`` attempts, then returns "ok"."""
        if job.attempt <= job.payload.get("fail", 1):
            raise ValueError(f"flaky attempt {job.attempt}")
        return "ok"

    return pool


pool = build()
