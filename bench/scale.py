"""Figure 5, scale: claim latency with an empty table versus one with a large history and backlog.

The timed unit is what a worker pays for one claim: a transaction around
``workerpool.queries.claim`` (BEGIN, the claim statement, COMMIT), measured in this process.
"Empty" means the table holds nothing but the rows the timed claims take; "large" adds
1 000 000 ``done`` rows and a 100 000-row due backlog. Both claim the same number of rows per
call, so the difference is what the table's size costs the claim.
"""

from __future__ import annotations

import time

from workerpool import WorkerPool, queries
from workerpool.jobs import new_worker_id

from .app import QUEUE
from .report import percentile

WARM_UP_CLAIMS = 20


def claim_latencies_ms(pool: WorkerPool, claims: int, limit: int) -> list[float]:
    """Time ``claims`` successive claims of up to ``limit`` rows; each must claim something."""
    spec = pool.queue_spec(QUEUE)
    versions = pool.task_versions(QUEUE)
    worker = new_worker_id()
    latencies = []
    for _ in range(claims):
        started = time.perf_counter()
        with pool.engine.begin() as conn:
            rows = queries.claim(conn, queue=QUEUE, worker=worker, limit=limit,
                                 task_versions=versions, stale_after=spec.stale_after)
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


__all__ = ["claim_latencies_ms", "p50_p99", "rows_needed", "warm_up"]
