"""Workflows: what a dependency costs a job, how long a chain takes against the pickup floor,
and a sequence's throughput against a plain queue's.

- **A dependency per job**: enqueue: ``jobs / 2`` rounds of three ``pool.enqueue`` calls, a
  parent, a plain job and a child ``after=[parent]``, each call timed (interleaved, so a noisy
  machine slows both alike): the median microseconds of a plain call and of a call with
  ``after=``. Drain: ``jobs`` no-op jobs, once plain and once as parent and child pairs (which
  goes first alternates per repeat), jobs per second from the rows' own timestamps (first claim
  to last completion, database clock), one ``workerpool run`` child; each parent's completing
  transaction releases its child.
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
from .database import every_job
from .report import Report, percentile
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

PLAIN_ENQUEUE = "workflow_plain_enqueue_us"
DEPENDENT_ENQUEUE = "workflow_dependent_enqueue_us"
PLAIN_DRAIN = "workflow_plain_drain_jobs_per_s"
DEPENDENT_DRAIN = "workflow_dependent_drain_jobs_per_s"
CHAIN = "workflow_chain_per_link_ms"
SEQUENCE = "workflow_sequence_drain_jobs_per_s"


def sizes(batch_members: int) -> tuple[int, int, int]:
    """(jobs for the dependency's cost, chain length, sequence length) from the bench's size:
    2,000, 1,000 and 500 at the default size; 100, 50 and 50 for ``--quick``."""
    return (
        min(batch_members // 2, 2000),
        min(batch_members // 4, 1000),
        min(batch_members // 4, 500),
    )


def declare(report: Report, batch_members: int) -> None:
    jobs, chain, sequence = sizes(batch_members)
    report.declare(PLAIN_ENQUEUE, "us", note="median pool.enqueue of a plain no-op")
    report.declare(
        DEPENDENT_ENQUEUE,
        "us",
        ratio_to=PLAIN_ENQUEUE,
        note="median pool.enqueue with after=[a pending job] (interleaved with the plain ones)",
    )
    report.declare(PLAIN_DRAIN, "jobs/s", note=f"{jobs:,} plain no-ops, 1 worker child")
    report.declare(
        DEPENDENT_DRAIN,
        "jobs/s",
        ratio_to=PLAIN_DRAIN,
        note=f"{jobs // 2:,} parent/child pairs: each parent's outcome releases its child",
    )
    report.declare(
        CHAIN,
        "ms",
        note=f"a {chain:,}-job chain, first claim to last finish, per"
        " link; floor: pickup_notify_p50_ms + an outcome flush",
    )
    report.declare(
        SEQUENCE,
        "jobs/s",
        ratio_to=PLAIN_DRAIN,
        note=f"{sequence:,} no-ops in one sequence, 1 worker child",
    )


def measure(
    report: Report, launcher: Launcher, pool: WorkerPool, batch_members: int, repeat: int
) -> None:
    jobs, chain, sequence = sizes(batch_members)
    plain_us, dependent_us = _enqueue_costs(launcher, pool, jobs // 2)
    report.add(PLAIN_ENQUEUE, plain_us)
    report.add(DEPENDENT_ENQUEUE, dependent_us)
    log.info("enqueue: plain %.0f us, after= %.0f us", plain_us, dependent_us)
    order = [False, True] if repeat % 2 == 0 else [True, False]
    for dependent in order:
        drain_rate = _pairs(launcher, pool, jobs, dependent=dependent)
        report.add(DEPENDENT_DRAIN if dependent else PLAIN_DRAIN, drain_rate)
        log.info("%s: drain %.0f jobs/s", "pairs" if dependent else "plain", drain_rate)
    per_link = _chain(launcher, pool, chain)
    report.add(CHAIN, per_link)
    rate = _sequence(launcher, pool, sequence)
    report.add(SEQUENCE, rate)
    log.info("chain %.2f ms per link; sequence %.0f jobs/s", per_link, rate)


def _drained_rate(launcher: Launcher, n: int) -> float:
    done, seconds = launcher.db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done'")
    )[0]
    if done != n:
        raise RuntimeError(f"{done} of {n} jobs done")
    return n / seconds if seconds else float("inf")


def _enqueue_costs(launcher: Launcher, pool: WorkerPool, rounds: int) -> tuple[float, float]:
    """Median microseconds of a plain ``pool.enqueue`` and of one with ``after=``."""
    launcher.db.reset()
    plain: list[float] = []
    dependent: list[float] = []
    for i in range(rounds):
        parent = pool.enqueue(noop.__name__, {"i": i}, delay=3600)
        began = time.perf_counter()
        pool.enqueue(noop.__name__, {"i": i}, delay=3600)
        middle = time.perf_counter()
        pool.enqueue(noop.__name__, {"i": i}, after=[parent])
        ended = time.perf_counter()
        plain.append((middle - began) * 1e6)
        dependent.append((ended - middle) * 1e6)
    return percentile(plain, 50), percentile(dependent, 50)


def _pairs(launcher: Launcher, pool: WorkerPool, jobs: int, *, dependent: bool) -> float:
    launcher.db.reset()
    parents = pool.enqueue_many(
        [(noop.__name__, {"i": i}, {"delay": 3600}) for i in range(jobs // 2)]
    )
    if dependent:
        pool.enqueue_many(
            [(noop.__name__, {"i": i}, {"after": [parent]}) for i, parent in enumerate(parents)]
        )
    else:
        pool.enqueue_many([(noop.__name__, {"i": i}, {"delay": 3600}) for i in range(jobs // 2)])
    launcher.db.sql("UPDATE workerpool_jobs SET run_at = now() WHERE state = 'pending'")
    with launcher.running(1) as supervisors:
        wait_drained(launcher.db, jobs, supervisors)
    return _drained_rate(launcher, jobs // 2 * 2)


def _chain(launcher: Launcher, pool: WorkerPool, length: int) -> float:
    launcher.db.reset()
    with launcher.running(1) as supervisors:
        pool.chain([(noop.__name__, {"i": i}) for i in range(length)])
        wait_drained(launcher.db, length, supervisors)
    seconds = launcher.db.sql(
        "SELECT extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done'")
    )[0][0]
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
