"""Attempt logs: what capturing a handler's records costs a drain.

``n`` jobs of ``chatty`` (two WARNING records each) drained by one ``workerpool run`` child,
once on the bench queue as it is (records logged, not kept) and once with the queue's
``capture_logs`` on (``$BENCH_CAPTURE_LOGS``: each attempt's records written with its
outcome), interleaved (which goes first alternates per repeat). Jobs per second from the rows'
own timestamps (first claim to last completion, database clock).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from workerpool import WorkerPool

from .app import CAPTURE_LOGS_ENV, chatty
from .database import every_job
from .report import Report
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

OFF = "logs_off_jobs_per_s"
ON = "logs_on_jobs_per_s"


def declare(report: Report, jobs: int) -> None:
    report.declare(
        OFF, "jobs/s", note=f"{jobs:,} jobs logging 2 records each, capture off, 1 worker child"
    )
    report.declare(
        ON,
        "jobs/s",
        ratio_to=OFF,
        note="the same with capture_logs=True (records kept per attempt)",
    )


def measure(report: Report, launcher: Launcher, pool: WorkerPool, jobs: int, repeat: int) -> None:
    order = [False, True] if repeat % 2 == 0 else [True, False]
    for capture in order:
        rate = _drain(launcher, pool, jobs, capture=capture)
        report.add(ON if capture else OFF, rate)
        log.info("capture %s: %.0f jobs/s", "on" if capture else "off", rate)


def _drain(launcher: Launcher, pool: WorkerPool, jobs: int, *, capture: bool) -> float:
    bench_db = launcher.db
    bench_db.reset()
    capturing = Launcher(
        bench_db,
        Path(tempfile.mkdtemp(dir=launcher.workdir)),
        launcher.concurrency,
        {**launcher.extra_env, CAPTURE_LOGS_ENV: "1" if capture else "0"},
    )
    with capturing.running(1) as supervisors:
        pool.enqueue_many([(chatty.__name__, {"i": i}) for i in range(jobs)])
        wait_drained(bench_db, jobs, supervisors)
    done, seconds = bench_db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done' AND payload ? 'i'")
    )[0]
    if done != jobs:
        raise RuntimeError(f"{done} of {jobs} jobs done")
    kept = bench_db.sql("SELECT count(*) FROM workerpool_job_logs")[0][0]
    if kept != (jobs if capture else 0):
        raise RuntimeError(f"{kept} attempt logs kept for {jobs} jobs (capture {capture})")
    return jobs / seconds if seconds else float("inf")
