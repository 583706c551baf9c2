"""An application with a poison message: a handler that takes its process down.

``poison`` calls ``os._exit`` (standing in for a segfault in a C extension, an OOM kill or a C
library's ``abort()``). Every handler first appends ``<task> <job id> <attempt>`` to the file
named by ``TEST_LEDGER``, so a test can count the runs, the fatal ones included.
"""

from __future__ import annotations

import os
import time

from workerpool import Backoff, Job, WorkerPool

CONCURRENCY = int(os.environ.get("TEST_CONCURRENCY", "4"))


def record(job: Job) -> None:
    line = f"{job.task} {job.id} {job.attempt}\n".encode()
    fd = os.open(os.environ["TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)
    pool.queue("work", concurrency=CONCURRENCY, poll_interval=0.1, drain_timeout=1, hang_timeout=5)

    @pool.task(queue="work", max_attempts=5)
    def ordinary(job: Job) -> None:
        record(job)
        time.sleep(job.payload.get("seconds", 0.005))

    @pool.task(queue="work", max_attempts=5)
    def poison(job: Job) -> None:
        record(job)
        os._exit(70)

    @pool.task(queue="work", max_attempts=5, backoff=Backoff(base=0.1, cap=0.1))
    def crashes_on_second_attempt(job: Job) -> None:
        """Fails on attempt 1, takes its process down on attempt 2, succeeds after."""
        record(job)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")
        if job.attempt == 2:
            os._exit(70)

    return pool


pool = build()
