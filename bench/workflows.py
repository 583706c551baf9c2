"""Workflows: what a dependency costs a job, how long a chain takes against the pickup floor,
and a sequence's throughput against a plain queue's.

- **A dependency per job**: ``jobs`` no-op jobs enqueued one call at a time, once plain and once
  as parent and child pairs (the child ``after=[parent]``), interleaved (which goes first
  alternates per repeat). Enqueue: jobs per second of the enqueuing calls. Drain: jobs per
  second from the rows' own timestamps (first claim to last completion, database clock), one
  ``workerpool run`` child; each parent's completing transaction releases its child.
- **A chain**: ``chain`` no-op jobs, each after the previous one (``pool.chain``, one
  transaction), run by one idle child. Per link: the last job's ``finished_at`` minus the first
  one's ``claimed_at``, over the links; its floor is the pickup of a job made due by an outcome
  (``pickup_notify_p50_ms`` of the ``pickup`` section, plus one outcome flush).
- **A sequence**: ``sequence`` no-op jobs enqueued with one ``sequence=`` name, drained by one
  child, against the same number of plain jobs: a sequence runs one job at a time, so its rate is
  one over (pickup + run + outcome), whatever the concurrency.
"""

from __future__ import annotations

import logging
import time

from workerpool import WorkerPool

from .app import noop
from .report import Report
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

PLAIN_ENQUEUE = "workflow_plain_enqueue_jobs_per_s"
DEPENDENT_ENQUEUE = "workflow_dependent_enqueue_jobs_per_s"
PLAIN_DRAIN = "workflow_plain_drain_jobs_per_s"
DEPENDENT_DRAIN = "workflow_dependent_drain_jobs_per_s"
CHAIN = "workflow_chain_per_link_ms"
SEQUENCE = "workflow_sequence_drain_jobs_per_s"


def sizes(batch_members: int) -> tuple[int, int, int]:
    """(jobs for the dependency's cost, chain length, sequence length) from the bench's size."""
    return min(batch_members, 2000), min(batch_members, 1000), min(batch_members, 500)


def declare(report: Report, batch_members: int) -> None:
    jobs, chain, sequence = sizes(batch_members)
    report.declare(PLAIN_ENQUEUE, "jobs/s", note=f"{jobs:,} pool.enqueue calls, plain no-ops")
    report.declare(DEPENDENT_ENQUEUE, "jobs/s", ratio_to=PLAIN_ENQUEUE,
                   note=f"{jobs:,} pool.enqueue calls, half of them after=[the other half]")
    report.declare(PLAIN_DRAIN, "jobs/s", note=f"{jobs:,} plain no-ops, 1 worker child")
    report.declare(DEPENDENT_DRAIN, "jobs/s", ratio_to=PLAIN_DRAIN,
                   note=f"{jobs // 2:,} parent/child pairs: each parent's outcome releases its"
                        " child")
    report.declare(CHAIN, "ms", note=f"a {chain:,}-job chain, first claim to last finish, per"
                                     " link; floor: pickup_notify_p50_ms + an outcome flush")
    report.declare(SEQUENCE, "jobs/s", ratio_to=PLAIN_DRAIN,
                   note=f"{sequence:,} no-ops in one sequence, 1 worker child")


def measure(report: Report, launcher: Launcher, pool: WorkerPool, batch_members: int,
            repeat: int) -> None:
    jobs, chain, sequence = sizes(batch_members)
    order = [False, True] if repeat % 2 == 0 else [True, False]
    for dependent in order:
        enqueue_rate, drain_rate = _pairs(launcher, pool, jobs, dependent=dependent)
        report.add(DEPENDENT_ENQUEUE if dependent else PLAIN_ENQUEUE, enqueue_rate)
        report.add(DEPENDENT_DRAIN if dependent else PLAIN_DRAIN, drain_rate)
        log.info("%s: enqueue %.0f jobs/s, drain %.0f jobs/s",
                 "pairs" if dependent else "plain", enqueue_rate, drain_rate)
    per_link = _chain(launcher, pool, chain)
    report.add(CHAIN, per_link)
    rate = _sequence(launcher, pool, sequence)
    report.add(SEQUENCE, rate)
    log.info("chain %.2f ms per link; sequence %.0f jobs/s", per_link, rate)


def _drained_rate(launcher: Launcher, n: int) -> float:
    done, seconds = launcher.db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM workerpool_jobs WHERE state = 'done'")[0]
    if done != n:
        raise RuntimeError(f"{done} of {n} jobs done")
    return n / seconds if seconds else float("inf")


def _pairs(launcher: Launcher, pool: WorkerPool, jobs: int, *, dependent: bool
           ) -> tuple[float, float]:
    launcher.db.reset()
    began = time.perf_counter()
    for i in range(jobs // 2):
        parent = pool.enqueue(noop.__name__, {"i": i}, delay=3600)
        if dependent:
            pool.enqueue(noop.__name__, {"i": i}, after=[parent])
        else:
            pool.enqueue(noop.__name__, {"i": i}, delay=3600)
    enqueue_rate = (jobs // 2 * 2) / (time.perf_counter() - began)
    launcher.db.sql("UPDATE workerpool_jobs SET run_at = now() WHERE state = 'pending'")
    with launcher.running(1) as supervisors:
        wait_drained(launcher.db, jobs, supervisors)
    return enqueue_rate, _drained_rate(launcher, jobs // 2 * 2)


def _chain(launcher: Launcher, pool: WorkerPool, length: int) -> float:
    launcher.db.reset()
    with launcher.running(1) as supervisors:
        pool.chain([(noop.__name__, {"i": i}) for i in range(length)])
        wait_drained(launcher.db, length, supervisors)
    seconds = launcher.db.sql(
        "SELECT extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM workerpool_jobs WHERE state = 'done'")[0][0]
    return seconds * 1000.0 / max(length - 1, 1)


def _sequence(launcher: Launcher, pool: WorkerPool, length: int) -> float:
    launcher.db.reset()
    with pool.engine.begin() as conn:
        for i in range(length):
            pool.enqueue(noop.__name__, {"i": i}, sequence="bench", delay=0, conn=conn)
    with launcher.running(1) as supervisors:
        wait_drained(launcher.db, length, supervisors)
    return _drained_rate(launcher, length)


__all__ = ["declare", "measure"]
