"""An application for the dashboard's tests: one queue whose tasks fail, succeed or wait.

``boom`` raises on its only attempt, with markup in its message, so a dead job with a real
traceback takes one drain; ``ok`` succeeds. The browser test serves this app with
``workerpool web tests.apps.web:pool`` (so a retry knows the tasks).
"""

from __future__ import annotations

from workerpool import Job, WorkerPool

SCRIPT = "<script>alert('x')</script>"


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("email")
    pool.queue("reports")

    @pool.task(queue="email", max_attempts=1)
    def boom(job: Job) -> None:
        raise RuntimeError(f"the mail server said no {SCRIPT}")

    @pool.task(queue="email")
    def ok(job: Job) -> None:
        job.checkpoint({"step": 1})

    @pool.task(queue="reports", max_attempts=1, version=2)
    def monthly(job: Job) -> None:
        raise ValueError("report failed")

    return pool


pool = build()
