"""The application of tests/processes/test_run_log_capture.py: one queue that keeps its attempts'
logs, whose handler logs through an application logger at INFO, WARNING and DEBUG."""

from __future__ import annotations

import logging

from workerpool import Job, WorkerPool

log = logging.getLogger("logged.imports")

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL
pool.queue("imports", capture_logs=True, poll_interval=0.1, drain_timeout=2, hang_timeout=10)


@pool.task(queue="imports")
def load(job: Job) -> None:
    log.debug("debug detail of %s", job.payload["file"])
    log.info("reading %s", job.payload["file"])
    log.warning("row 7 of %s skipped", job.payload["file"])
