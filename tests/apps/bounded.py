"""An application with a bounded queue, for `workerpool enqueue` and `workerpool run` tests."""

from __future__ import annotations

from workerpool import Job, WorkerPool

BOUND = 2

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL
pool.queue("tiny", max_pending=BOUND, poll_interval=0.1)


@pool.task(queue="tiny")
def note(job: Job) -> None:
    return None
