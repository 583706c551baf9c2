"""Effects once: a job that writes its effect and ends itself in one transaction
(``job.complete_in``) against a plain job that writes the same effect in a transaction of its
own and leaves its ``done`` to the worker's batched outcome write; and both against the plain
path, a handler that writes nothing and returns (``noop``: the worker's outcome write only).

- **Throughput**: ``n`` jobs of each kind (one row in ``bench_effects`` each, none for the
  no-op), drained by one ``workerpool run`` child, interleaved (the kinds' order rotates per
  repeat); jobs per second from the rows' own timestamps (first claim to last completion,
  database clock).
- **End to end**: ``ALONE`` jobs of each kind enqueued one at a time into an idle child,
  enqueue to completion (database clock), p50.
"""

from __future__ import annotations

import logging

from workerpool import WorkerPool

from .app import EFFECTS_TABLE, noop
from .database import every_job
from .report import Report, percentile
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

ALONE = 30  # jobs of each kind run one at a time per repeat, at the full size (10,000 jobs)
PLAIN = "once_plain_jobs_per_s"
FENCED = "once_complete_in_jobs_per_s"
PLAIN_E2E = "once_plain_job_p50_ms"
FENCED_E2E = "once_complete_in_job_p50_ms"
RETURN = "once_return_jobs_per_s"
KINDS = {False: "effect_plain", True: "effect_once"}
#: The drains of a repeat: (figure, task, whether each job writes an effect row).
DRAINS = (
    (PLAIN, KINDS[False], True),
    (FENCED, KINDS[True], True),
    (RETURN, noop.__name__, False),
)


def declare(report: Report, jobs: int) -> None:
    report.declare(RETURN, "jobs/s", note=f"{jobs:,} no-op jobs returning, 1 child: the plain path")
    report.declare(
        PLAIN,
        "jobs/s",
        ratio_to=RETURN,
        note=f"{jobs:,} jobs writing a row, own transaction, 1 child",
    )
    report.declare(
        FENCED,
        "jobs/s",
        ratio_to=PLAIN,
        also_to=RETURN,
        note=f"{jobs:,} jobs writing a row and complete_in in one transaction, 1 child",
    )
    report.declare(PLAIN_E2E, "ms", note="one plain effect job in an idle child, enqueue to done")
    report.declare(
        FENCED_E2E,
        "ms",
        ratio_to=PLAIN_E2E,
        note="one complete_in job in an idle child, enqueue to done",
    )


def measure(report: Report, launcher: Launcher, pool: WorkerPool, jobs: int, repeat: int) -> None:
    launcher.db.sql(EFFECTS_TABLE)
    shift = repeat % len(DRAINS)
    for figure, task, writes in DRAINS[shift:] + DRAINS[:shift]:
        rate = _drain(launcher, pool, jobs, task, writes=writes)
        report.add(figure, rate)
        log.info("%s: %.0f jobs/s", task, rate)
    order = [False, True] if repeat % 2 == 0 else [True, False]
    alone = max(5, min(ALONE, ALONE * jobs // 10_000))  # --quick: fewer
    for fenced in order:
        runs = _alone(launcher, pool, fenced, alone)
        report.add(FENCED_E2E if fenced else PLAIN_E2E, percentile(runs, 50))


def _drain(launcher: Launcher, pool: WorkerPool, jobs: int, task: str, *, writes: bool) -> float:
    bench_db = launcher.db
    bench_db.reset()
    bench_db.sql("TRUNCATE bench_effects")
    with launcher.running(1) as supervisors:
        pool.enqueue_many([(task, {"i": i}) for i in range(jobs)])
        wait_drained(bench_db, jobs, supervisors)
    done, seconds = bench_db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done' AND payload ? 'i'")
    )[0]
    effects = bench_db.sql("SELECT count(*) FROM bench_effects")[0][0]
    if done != jobs or effects != (jobs if writes else 0):
        raise RuntimeError(f"{task}: {done} of {jobs} jobs done, {effects} effects written")
    return jobs / seconds if seconds else float("inf")


def _alone(launcher: Launcher, pool: WorkerPool, fenced: bool, alone: int) -> list[float]:
    launcher.db.reset()
    runs: list[float] = []
    with launcher.running(1):
        for number in range(alone + 3):  # the first three warm the connections up
            job_id = pool.enqueue(KINDS[fenced], {"alone": number})
            pool.result(job_id, timeout=30)
            if number >= 3:
                runs.append(
                    launcher.db.sql(
                        "SELECT extract(epoch FROM finished_at - created_at)::float8 * 1000"
                        " FROM " + every_job("finished_at, created_at", "id = %s"),
                        (job_id, job_id),
                    )[0][0]
                )
    return runs


__all__ = ["declare", "measure"]
