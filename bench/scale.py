"""Figure 5, growth (``--only growth``, formerly ``scale``): claim latency with an empty table
versus one with a large history and backlog.

The timed unit is what a worker pays for one claim: a transaction around
``workerpool.sql.claim`` (BEGIN, the claim statement, COMMIT), measured in this process.
"Empty" means the table holds nothing but the rows the timed claims take; "large" adds
1 000 000 ``done`` rows and a 100 000-row due backlog (``--history``, ``--backlog``). Both claim
the same number of rows per call, so the difference is what the table's size costs the claim.
The large table is loaded server-side (``generate_series``) and VACUUM ANALYZEd; the time that
takes is logged. The empty table is in a second scratch database, so that the rounds on the two
alternate (``Growth``).
"""

from __future__ import annotations

import logging
import time

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.job import new_worker_id

from .app import QUEUE, make_pool, noop
from .database import BenchDatabase
from .report import Report, Target, percentile

log = logging.getLogger("workerpool.bench")

WARM_UP_CLAIMS = 20


def claim_latencies_ms(pool: WorkerPool, claims: int, limit: int) -> list[float]:
    """Time ``claims`` successive claims of up to ``limit`` rows; each must claim something."""
    versions = pool.registry.task_versions(QUEUE)
    worker = new_worker_id()
    latencies = []
    for _ in range(claims):
        started = time.perf_counter()
        with pool.engine.begin() as conn:
            rows = queries.claim(
                conn,
                queue=QUEUE,
                worker=worker,
                limit=limit,
                task_versions=versions,
            )
        latencies.append((time.perf_counter() - started) * 1000.0)
        if not rows:
            raise RuntimeError("the scale benchmark ran out of due rows; load more")
    return latencies


def p50_p99(latencies: list[float]) -> tuple[float, float]:
    return percentile(latencies, 50), percentile(latencies, 99)


def rows_needed(claims: int, limit: int, rounds: int) -> int:
    return (claims * rounds + WARM_UP_CLAIMS) * limit


def warm_up(pool: WorkerPool, limit: int) -> None:
    claim_latencies_ms(pool, WARM_UP_CLAIMS, limit)


def declare(report: Report) -> None:
    report.declare("claim_empty_p50_ms", "ms")
    report.declare("claim_empty_p99_ms", "ms")
    report.declare("claim_large_p50_ms", "ms", ratio_to="claim_empty_p50_ms")
    report.declare(
        "claim_large_p99_ms",
        "ms",
        ratio_to="claim_empty_p99_ms",
        target=Target("<=", 2.0, on_ratio=True),
    )


class Growth:
    """Measures the claim on the empty and on the large table into ``report``.

    The two tables live in two databases (the run's own and a second scratch one), so the rounds
    alternate between them: a shared machine's load, which moves within minutes, reaches both.
    """

    def __init__(
        self,
        bench_db: BenchDatabase,
        pool: WorkerPool,
        report: Report,
        *,
        claims: int,
        limit: int,
        repeats: int,
    ) -> None:
        self.db, self.pool, self.report = bench_db, pool, report
        self.claims, self.limit, self.repeats = claims, limit, repeats

    def run(self, *, history: int, backlog: int) -> None:
        with BenchDatabase(self.db.server_url) as empty_db:
            empty_pool = make_pool(empty_db.url)
            try:
                empty_db.load_pending(
                    QUEUE, noop.__name__, rows_needed(self.claims, self.limit, self.repeats)
                )
                empty_db.vacuum()
                self.load_large(history, backlog)
                self.alternate({"empty": empty_pool, "large": self.pool})
            finally:
                empty_pool.dispose()

    def load_large(self, history: int, backlog: int) -> None:
        self.db.reset()
        started = time.monotonic()
        self.db.load_finished(QUEUE, noop.__name__, history)
        self.db.load_pending(QUEUE, noop.__name__, backlog)
        self.db.vacuum()
        log.info(
            "growth: %d done + %d pending rows loaded and vacuumed in %.1f s",
            history,
            backlog,
            time.monotonic() - started,
        )

    def alternate(self, pools: dict[str, WorkerPool]) -> None:
        for pool in pools.values():
            warm_up(pool, self.limit)
        order = list(pools)
        for repeat in range(self.repeats):
            for table in order if repeat % 2 == 0 else order[::-1]:
                latencies = claim_latencies_ms(pools[table], self.claims, self.limit)
                p50, p99 = p50_p99(latencies)
                self.report.add(f"claim_{table}_p50_ms", p50)
                self.report.add(f"claim_{table}_p99_ms", p99)
                log.info("claim on the %s table: p50 %.3f ms, p99 %.3f ms", table, p50, p99)


__all__ = ["Growth", "claim_latencies_ms", "declare", "p50_p99", "rows_needed", "warm_up"]
