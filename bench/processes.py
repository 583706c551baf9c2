"""Several children per queue (section ``processes``): a CPU-bound handler drained by one
supervisor with ``processes=1`` and with ``processes=2``; then one supervisor with
``processes="auto"`` (a child per usable core) against as many supervisors of one child each,
the same children in two shapes.

The handler is ``bench.app.spin``: pure-Python rounds, as many as take ``SPIN_MS`` of CPU in
this process (calibrated once per run: the fastest of ``CALIBRATIONS`` timings of a fixed number
of rounds on ``time.thread_time``), so every job is the same work in either configuration. One
child runs its handlers on threads under one GIL, so its rate is capped near ``1000 / SPIN_MS``
jobs/s whatever its ``concurrency``; two children can use two cores.

Each drain: a fresh table, one supervisor whose ``CHILDREN_CONCURRENCY`` x N handler threads have
registered, N jobs committed at once, the rate from the rows (first ``claimed_at`` to last
``finished_at``, database clock), the queue children's CPU and the database backends' CPU (the
server runs on the same machine here: it competes for the same cores). Repeats are interleaved:
which configuration drains first alternates per repeat.
"""

from __future__ import annotations

import logging
import time

from workerpool import WorkerPool
from workerpool.process.oslayer import usable_cpus

from . import app, supervised
from .fleet import Backends
from .report import Report, Target

log = logging.getLogger("workerpool.bench")

SPIN_MS = 2.0
CALIBRATIONS = 20
CALIBRATION_ITERS = 20_000
#: Handler threads per child: more than one so that a job waits in no queue while the main
#: loop writes outcomes, few enough that the threads do not fight over the GIL for nothing.
CHILDREN_CONCURRENCY = 2
COUNTS = (1, 2)
SPIN = "processes_spin_ms"
#: The shapes compared at equal process counts: (figure's middle, supervisors, processes each).
AUTO = "processes_auto"
SEPARATE = "processes_separate"
SHAPES = ((AUTO, 1, "auto"), (SEPARATE, 0, 1))  # 0: one supervisor per usable core


def figure(processes: int, suffix: str = "jobs_per_s") -> str:
    return f"processes_{processes}_cpu_{suffix}"


def declare(report: Report, jobs: int) -> None:
    report.declare(
        SPIN,
        "ms",
        note="CPU of one spin job's handler in the bench process "
        "(calibrated rounds of pure Python)",
    )
    for processes in COUNTS:
        ratio, target = None, None
        if processes != COUNTS[0]:
            ratio, target = figure(COUNTS[0]), Target(">=", 1.7, on_ratio=True)
        report.declare(
            figure(processes),
            "jobs/s",
            ratio_to=ratio,
            target=target,
            note=f"one supervisor, processes={processes}, concurrency "
            f"{CHILDREN_CONCURRENCY}, {jobs} spin jobs of {SPIN_MS:g} ms CPU",
        )
        report.declare(
            figure(processes, "worker_cpu_us_per_job"),
            "us/job",
            note=f"processes={processes}: CPU of the queue children per job",
        )
        report.declare(
            figure(processes, "db_cpu_us_per_job"),
            "us/job",
            note=f"processes={processes}: CPU of the database backends per job",
        )


def declare_shapes(report: Report, jobs: int) -> None:
    cores = usable_cpus()
    report.declare(
        f"{SEPARATE}_jobs_per_s",
        "jobs/s",
        note=f"{cores} supervisors of processes=1, concurrency "
        f"{CHILDREN_CONCURRENCY}, {jobs} spin jobs",
    )
    report.declare(
        f"{AUTO}_jobs_per_s",
        "jobs/s",
        ratio_to=f"{SEPARATE}_jobs_per_s",
        note=f'one supervisor, processes="auto" ({cores} children), the same jobs',
    )
    for shape in (SEPARATE, AUTO):
        report.declare(
            f"{shape}_worker_cpu_us_per_job",
            "us/job",
            note=f"{shape}: CPU of the queue children per job",
        )


def calibrate(ms: float = SPIN_MS) -> int:
    """Rounds of ``app.spin_loop`` that take ``ms`` of CPU here (the fastest timing)."""
    best = float("inf")
    for _ in range(CALIBRATIONS):
        start = time.thread_time()
        app.spin_loop(CALIBRATION_ITERS)
        best = min(best, time.thread_time() - start)
    return max(1, round(CALIBRATION_ITERS * ms / 1000.0 / best))


def measure(
    report: Report,
    launcher: supervised.Launcher,
    pool: WorkerPool,
    jobs: int,
    repeat: int,
    iters: int,
) -> None:
    """One repeat: each configuration drains once, the order alternating with ``repeat``."""
    for processes in COUNTS if repeat % 2 == 0 else tuple(reversed(COUNTS)):
        rate, worker_us, db_us = drain(launcher, pool, jobs, processes, iters)
        report.add(figure(processes), rate)
        report.add(figure(processes, "worker_cpu_us_per_job"), worker_us)
        report.add(figure(processes, "db_cpu_us_per_job"), db_us)
        log.info(
            "processes=%d: %.0f spin jobs/s, worker CPU %.0f us/job, database CPU %.0f us/job",
            processes,
            rate,
            worker_us,
            db_us,
        )


def measure_shapes(
    report: Report,
    launcher: supervised.Launcher,
    pool: WorkerPool,
    jobs: int,
    repeat: int,
    iters: int,
) -> None:
    """One repeat of ``processes="auto"`` against one supervisor per core, order alternating."""
    for name, supervisors, processes in SHAPES if repeat % 2 == 0 else tuple(reversed(SHAPES)):
        rate, worker_us, _ = drain(
            launcher, pool, jobs, processes, iters, supervisors=supervisors or usable_cpus()
        )
        report.add(f"{name}_jobs_per_s", rate)
        report.add(f"{name}_worker_cpu_us_per_job", worker_us)
        log.info("%s: %.0f spin jobs/s, worker CPU %.0f us/job", name, rate, worker_us)


def drain(
    launcher: supervised.Launcher,
    pool: WorkerPool,
    jobs: int,
    processes: int | str,
    iters: int,
    *,
    supervisors: int = 1,
) -> tuple[float, float, float]:
    """(jobs/s, worker CPU us/job, database CPU us/job) of one drain by ``supervisors``
    supervisors of ``processes`` children each."""
    bench_db = launcher.db
    bench_db.reset()
    backends = Backends(bench_db)  # before the supervisors connect: theirs are not ours
    expected = supervisors * (usable_cpus() if processes == "auto" else int(processes))
    with launcher.running(supervisors, processes=processes) as running:
        children = [pid for supervisor in running for pid in supervisor.queue_children()]
        if len(children) != expected:
            raise RuntimeError(f"processes={processes}: {len(children)} queue children")
        worker_start = sum(supervised.cpu_seconds(pid) for pid in children)
        backends.begin()
        with pool.engine.begin() as conn:
            pool.enqueue_many([(app.spin.__name__, {"iters": iters})] * jobs, conn=conn)
        supervised.wait_drained(bench_db, jobs, running)
        worker = sum(supervised.cpu_seconds(pid) for pid in children) - worker_start
        database = backends.cpu_seconds()
    done, seconds = bench_db.drain_window()
    if done != jobs:
        raise RuntimeError(f"processes={processes}: {done} of {jobs} spin jobs done")
    return (
        done / seconds if seconds > 0 else float("inf"),
        worker * 1e6 / jobs,
        database * 1e6 / jobs,
    )
