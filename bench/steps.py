"""Durable steps: what a step costs against a plain checkpoint, and a 10-step job against 10
plain jobs.

- **A step against a checkpoint**: on jobs claimed in this process, ``STEPS_PER_JOB`` steps
  (``job.step`` with a no-op function: its fenced ``UPDATE`` of the job's ``steps``) and as many
  checkpoints (``job.checkpoint``: its fenced ``UPDATE`` of ``checkpoint``), each in a
  transaction of its own on the pool's engine, interleaved job by job. Latency per write, p50.
- **A 10-step job against 10 plain jobs**: ``n`` jobs of ten no-op steps, and ``10 n`` no-op
  jobs, each drained by one ``workerpool run`` child, interleaved (which goes first alternates
  per repeat); units of work (a step, or a plain job) per second from the rows' own timestamps
  (first claim to last completion, database clock). And one 10-step job's run alone, claim to
  completion (database clock), p50.
"""

from __future__ import annotations

import logging
import time

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.job import new_worker_id
from workerpool.runtime.inline import make_job

from .app import QUEUE, STEPS, noop, stepped
from .database import every_job
from .report import Report, Target, percentile
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

STEPS_PER_JOB = 10  # writes per job, for the step and the checkpoint alike
# Per repeat, at the full size (1,000 step jobs); a smaller run (--quick) scales them down
# with its job count, to a floor of 5.
WRITE_JOBS = 50  # jobs, each written STEPS_PER_JOB times each way
ALONE = 30  # 10-step jobs run one at a time
STEP = "step_write_p50_ms"
CHECKPOINT = "checkpoint_write_p50_ms"
PLAIN = "steps_plain_units_per_s"
STEPPED = "steps_10step_units_per_s"
ALONE_FIGURE = "steps_10step_job_run_p50_ms"


def declare(report: Report, jobs: int) -> None:
    report.declare(CHECKPOINT, "ms", note="job.checkpoint: one fenced UPDATE, own transaction")
    report.declare(
        STEP,
        "ms",
        ratio_to=CHECKPOINT,
        target=Target("<=", 1.5, on_ratio=True),
        note=f"job.step of a no-op (up to {STEPS_PER_JOB} per job): one fenced UPDATE of the steps",
    )
    report.declare(PLAIN, "jobs/s", note=f"{jobs * STEPS:,} no-op jobs, 1 worker child")
    report.declare(
        STEPPED,
        "steps/s",
        ratio_to=PLAIN,
        note=f"{jobs:,} jobs of {STEPS} no-op steps, 1 worker child",
    )
    report.declare(
        ALONE_FIGURE,
        "ms",
        note=f"one {STEPS}-step job in an idle child, claim to completion (database clock)",
    )


def scaled(count: int, jobs: int) -> int:
    """``count`` (a size at 1,000 jobs) for a run of ``jobs``, at least 5."""
    return max(5, min(count, count * jobs // 1000))


def measure(report: Report, launcher: Launcher, pool: WorkerPool, jobs: int, repeat: int) -> None:
    steps, checkpoints = _writes(launcher, pool, scaled(WRITE_JOBS, jobs))
    report.add(STEP, percentile(steps, 50))
    report.add(CHECKPOINT, percentile(checkpoints, 50))
    order = [False, True] if repeat % 2 == 0 else [True, False]
    for with_steps in order:
        rate = _drain(launcher, pool, jobs, with_steps=with_steps)
        report.add(STEPPED if with_steps else PLAIN, rate)
        log.info("%s: %.0f units/s", "10-step jobs" if with_steps else "plain jobs", rate)
    report.add(ALONE_FIGURE, percentile(_alone(launcher, pool, scaled(ALONE, jobs)), 50))


def _writes(
    launcher: Launcher, pool: WorkerPool, write_jobs: int
) -> tuple[list[float], list[float]]:
    """Per-write latencies (ms) of steps and of checkpoints, interleaved job by job."""
    launcher.db.reset()
    pool.enqueue_many([(noop.__name__, {"w": i}) for i in range(2 * write_jobs)])
    worker = new_worker_id()
    with pool.engine.begin() as conn:
        rows = queries.claim(
            conn,
            queue=QUEUE,
            worker=worker,
            limit=2 * write_jobs,
            task_versions=pool.registry.task_versions(QUEUE),
        )
    steps: list[float] = []
    checkpoints: list[float] = []
    for row in rows:
        _, job = make_job(pool.registry, pool.engine, row, worker)
        as_step = row.payload["w"] % 2 == 0
        for number in range(STEPS_PER_JOB):
            began = time.perf_counter()
            if as_step:
                job.step(f"s{number}", lambda: None)
            else:
                job.checkpoint({"step": number})
            (steps if as_step else checkpoints).append((time.perf_counter() - began) * 1000.0)
    return steps, checkpoints


def _drain(launcher: Launcher, pool: WorkerPool, jobs: int, *, with_steps: bool) -> float:
    bench_db = launcher.db
    bench_db.reset()
    if with_steps:
        items = [(stepped.__name__, {"i": i}) for i in range(jobs)]
    else:
        items = [(noop.__name__, {"i": i}) for i in range(jobs * STEPS)]
    with launcher.running(1) as supervisors:
        pool.enqueue_many(items)
        wait_drained(bench_db, len(items), supervisors)
    done, seconds = bench_db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done' AND payload ? 'i'")
    )[0]
    if done != len(items):
        raise RuntimeError(f"{done} of {len(items)} jobs done")
    return jobs * STEPS / seconds if seconds else float("inf")


def _alone(launcher: Launcher, pool: WorkerPool, alone: int) -> list[float]:
    launcher.db.reset()
    runs: list[float] = []
    with launcher.running(1):
        for number in range(alone + 3):  # the first three warm the connections up
            job_id = pool.enqueue(stepped.__name__, {"alone": number})
            pool.result(job_id, timeout=30)
            if number >= 3:
                runs.append(
                    launcher.db.sql(
                        "SELECT extract(epoch FROM finished_at - claimed_at)::float8 * 1000"
                        " FROM " + every_job("finished_at, claimed_at", "id = %s"),
                        (job_id, job_id),
                    )[0][0]
                )
    return runs


__all__ = ["declare", "measure"]
