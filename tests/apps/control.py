"""The application of tests/processes/test_cancel_processes.py: handlers that obey a cancel,
one that ignores it, an async one, and a short one. ``TEST_CANCEL_GRACE`` sets the queue's
cancel_grace (default 1 s), ``TEST_CANCEL_DRAIN`` its drain_timeout (default 10 s).

A handler that sees its cancel writes ``time.time()`` to the file its payload names (``stamp``):
the test measures how long the cancel took to reach it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from workerpool import Job, WorkerPool

GRACE = float(os.environ.get("TEST_CANCEL_GRACE", "1"))
DRAIN = float(os.environ.get("TEST_CANCEL_DRAIN", "10"))

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL
pool.queue(
    "ctl",
    concurrency=2,
    cancel_grace=GRACE,
    poll_interval=0.1,
    drain_timeout=DRAIN,
    hang_timeout=10,
)
pool.queue("other", concurrency=2, poll_interval=0.1, drain_timeout=1, hang_timeout=10)


def stamp(job: Job) -> None:
    if job.payload.get("stamp"):
        Path(job.payload["stamp"]).write_text(repr(time.time()))


@pool.task(queue="ctl")
def waits(job: Job) -> None:
    """Waits for its cancel (up to a minute), then returns normally: still ``cancelled``."""
    job.cancelled.wait(60)
    stamp(job)


@pool.task(queue="ctl")
def stubborn(job: Job) -> None:
    """Ignores its cancel: sleeps ``seconds`` (default 60)."""
    time.sleep(job.payload.get("seconds", 60))


@pool.task(queue="ctl")
async def sleeps(job: Job) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        stamp(job)
        raise


@pool.task(queue="ctl")
def quick(job: Job) -> None:
    time.sleep(job.payload.get("seconds", 0.1))


@pool.task(queue="other")
def elsewhere(job: Job) -> None:
    time.sleep(job.payload.get("seconds", 0.1))
