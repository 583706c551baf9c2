"""The limits comparison: drain throughput and claim latency with each limit off and on.

Every configuration runs on the same rows: a backlog of pending no-op jobs spread round-robin
over ``KEYS`` concurrency keys (the key is stored whether or not a limit reads it), so the only
difference between two figures is the limit. Each limit is on but not binding:

- ``global``: ``global_concurrency`` far above what the workers can hold;
- ``rate``: ``rate_limit`` far above the drain's rate (the limit is never reached, and every
  claim adds to its window's count);
- ``key``: ``concurrency_limit=1`` per key on the task; with 1,000 keys round-robin, the jobs
  held at once always have distinct keys, yet each claim checks every row's key.

Repeats are interleaved (every repeat runs every configuration, the order rotating), with the
same number of supervisors for each, so drift on a shared machine spreads over all of them.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import Engine

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.job import new_worker_id
from workerpool.model.limits import claim_limits
from workerpool.runtime.worker import session_limits
from workerpool.sql import db

from . import app, supervised
from .database import BenchDatabase
from .report import Report, Target, percentile

log = logging.getLogger("workerpool.bench")

KEYS = 1_000
CONFIGS = tuple(app.LIMIT_SETTINGS)
CHILDREN = 2  # supervisors per drain, whatever the configuration
WARM_UP_CLAIMS = 20
COMPLETE_EVERY = 50  # timed claims between untimed completions (in-flight stays realistic)


def declare(report: Report) -> None:
    base = "limits_drain_off_jobs_per_s"
    report.declare(base, "jobs/s", note=f"{CHILDREN} x workerpool run, no limit, {KEYS} keys")
    for config in CONFIGS[1:]:
        report.declare(
            f"limits_drain_{config}_jobs_per_s",
            "jobs/s",
            ratio_to=base,
            target=Target(">=", 0.8, on_ratio=True),
            note=f"the same with the {config} limit on, not binding",
        )
    cpu = "limits_drain_off_cpu_us_per_job"
    report.declare(cpu, "us/job", note="CPU of the worker children and their database backends")
    for config in CONFIGS[1:]:
        report.declare(
            f"limits_drain_{config}_cpu_us_per_job",
            "us/job",
            ratio_to=cpu,
            note=f"the same with the {config} limit (steadier than the wall clock)",
        )
    for p in (50, 99):
        off = f"limits_claim_off_p{p}_ms"
        report.declare(off, "ms", note="BEGIN, claim of 10, COMMIT; no limit")
        for config in CONFIGS[1:]:
            report.declare(
                f"limits_claim_{config}_p{p}_ms",
                "ms",
                ratio_to=off,
                target=Target("<=", 2.0, on_ratio=True) if p == 99 else None,
                note=f"the same with the {config} limit (lock + limited claim)",
            )


def load_backlog(bench_db: BenchDatabase, count: int) -> None:
    """``count`` due no-op rows, ``KEYS`` concurrency keys round-robin, in one statement."""
    bench_db.sql(
        "INSERT INTO workerpool_jobs (queue, task, payload, concurrency_key)"
        " SELECT %s, %s, jsonb_build_object('i', i), 'k' || (i %% %s)"
        " FROM generate_series(1, %s) AS i",
        (app.QUEUE, app.noop.__name__, KEYS, count),
    )


def drain(launcher: supervised.Launcher, config: str, n: int) -> tuple[float, float]:
    """``(jobs per second, CPU µs per job)`` draining ``n`` rows with ``config``'s limit: the
    rate from the rows (first claim to last done), the CPU of the worker children and of the
    database backends serving them, from the drain's start to its end."""
    bench_db = launcher.db
    bench_db.reset()
    launcher.extra_env[app.LIMITS_ENV] = config
    with launcher.running(CHILDREN) as supervisors:
        before = _cpu(bench_db, supervisors)
        load_backlog(bench_db, n)
        supervised.wait_drained(bench_db, n, supervisors)
        used = _cpu(bench_db, supervisors) - before
    done, seconds = bench_db.drain_window()
    if done != n:
        raise RuntimeError(f"limits drain ({config}): {done} of {n} jobs done")
    return done / seconds if seconds > 0 else float("inf"), used * 1e6 / n


def _cpu(bench_db: BenchDatabase, supervisors: list[supervised.Supervisor]) -> float:
    """CPU seconds used so far by the queue children and every other backend of the bench
    database (the workers' connections; this process's own is excluded)."""
    backends = [
        pid
        for (pid,) in bench_db.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
    ]
    children = [pid for s in supervisors for pid in s.queue_children()]
    return sum(supervised.cpu_seconds(pid) for pid in children + backends)


def claim_latencies_ms(
    bench_db: BenchDatabase, engine: Engine, pool: WorkerPool, claims: int
) -> list[float]:
    """``claims`` timed claims of up to 10 rows of ``pool``'s queue, as a limited worker runs
    them (on ``engine``, a connection set up as the worker's); every ``COMPLETE_EVERY`` claims
    the claimed rows are marked done, untimed."""
    spec = pool.registry.queue_spec(app.QUEUE)
    limits = claim_limits(spec, pool.tasks)
    versions = pool.registry.task_versions(app.QUEUE)
    worker = new_worker_id()
    latencies = []
    for index in range(claims):
        started = time.perf_counter()
        with engine.begin() as conn:
            rows = queries.claim(
                conn,
                queue=app.QUEUE,
                worker=worker,
                limit=10,
                task_versions=versions,
                limits=limits,
            )
        latencies.append((time.perf_counter() - started) * 1000.0)
        if not rows:
            raise RuntimeError("the limits benchmark ran out of due rows; load more")
        if index % COMPLETE_EVERY == COMPLETE_EVERY - 1 or index == claims - 1:
            bench_db.sql(
                "UPDATE workerpool_jobs SET state = 'done', finished_at = now()"
                " WHERE state = 'processing'"
            )
    return latencies


class LimitsBench:
    """Measures the limits comparison into ``report``."""

    def __init__(
        self, bench_db: BenchDatabase, report: Report, *, n: int, repeats: int, claims: int
    ) -> None:
        self.db, self.report = bench_db, report
        self.n, self.repeats, self.claims = n, repeats, claims
        self.pools = {config: app.make_pool(bench_db.url, limits=config) for config in CONFIGS}
        self.engine = db.create(
            bench_db.url, application_name="workerpool:bench", session_settings=session_limits()
        )

    def close(self) -> None:
        for pool in self.pools.values():
            pool.dispose()
        self.engine.dispose()

    def run(self, launcher: supervised.Launcher) -> None:
        for repeat in range(self.repeats):
            order = CONFIGS[repeat % len(CONFIGS) :] + CONFIGS[: repeat % len(CONFIGS)]
            for config in order:
                rate, cpu_us = drain(launcher, config, self.n)
                self.report.add(f"limits_drain_{config}_jobs_per_s", rate)
                self.report.add(f"limits_drain_{config}_cpu_us_per_job", cpu_us)
                log.info("limits drain %s: %.0f jobs/s, %.0f us CPU per job", config, rate, cpu_us)
        launcher.extra_env.pop(app.LIMITS_ENV, None)
        self.claim_rounds()

    def claim_rounds(self) -> None:
        self.db.reset()
        needed = (self.claims * self.repeats + WARM_UP_CLAIMS) * 10 * len(CONFIGS)
        load_backlog(self.db, max(self.n, 2 * needed))  # twice: some keys are busy
        self.db.vacuum()
        for config in CONFIGS:
            claim_latencies_ms(self.db, self.engine, self.pools[config], WARM_UP_CLAIMS)
        for repeat in range(self.repeats):
            for config in CONFIGS[repeat % 2 :] + CONFIGS[: repeat % 2]:
                latencies = claim_latencies_ms(
                    self.db, self.engine, self.pools[config], self.claims
                )
                p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
                self.report.add(f"limits_claim_{config}_p50_ms", p50)
                self.report.add(f"limits_claim_{config}_p99_ms", p99)
                log.info("limits claim %s: p50 %.3f ms, p99 %.3f ms", config, p50, p99)
