"""The operator paths at scale: ``workerpool status``, ``workerpool dead list`` and the metrics
depth sample, timed on a table holding ``--finished`` finished rows.

Loading 10M rows takes minutes, so ``--database NAME`` keeps the loaded database for a later run
(the rows are loaded only when the table holds fewer than asked). Each path is timed in this
process the way the CLI runs it (its own engine, a fresh connection from the pool), after one
warm-up call: what grows with the table is the SQL, not Python's start-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.ops import dead, status

from .app import QUEUE, noop
from .database import BenchDatabase

log = logging.getLogger("workerpool.bench")

FIGURES = (
    ("status_ms", "workerpool status (status.collect)"),
    ("dead_list_ms", "workerpool dead list (list_dead, limit 100)"),
    ("depth_sample_ms", "the metrics depth sample (queries.queue_depths)"),
)
PENDING = 10_000
DEAD = 100


def load(bench_db: BenchDatabase, finished: int) -> None:
    """``finished`` done rows, plus a backlog and a few dead rows, unless already there."""
    have = bench_db.sql("SELECT reltuples::bigint FROM pg_class WHERE relname = 'workerpool_jobs'")
    if have and have[0][0] >= finished:
        log.info("operators: the table already holds ~%d rows; not loading", have[0][0])
        bench_db.sql("ANALYZE workerpool_jobs")  # a migration since may have added statistics
        return
    started = time.monotonic()
    bench_db.reset()
    bench_db.load_finished(QUEUE, noop.__name__, finished)
    bench_db.load_pending(QUEUE, noop.__name__, PENDING)
    bench_db.sql(
        "INSERT INTO workerpool_jobs (queue, task, state, dead_reason, attempts, max_attempts,"
        " finished_at) SELECT %s, %s, 'dead', 'exhausted', 1, 1, now()"
        " FROM generate_series(1, %s)",
        (QUEUE, noop.__name__, DEAD),
    )
    bench_db.vacuum()
    log.info("operators: loaded %d finished rows in %.0f s", finished, time.monotonic() - started)


def timings_ms(pool: WorkerPool, repeats: int) -> dict[str, list[float]]:
    """Each operator path timed ``repeats`` times (after one warm-up call)."""

    def depth() -> None:
        with pool.engine.connect() as conn:
            queries.queue_depths(conn, [QUEUE])

    paths: dict[str, Callable[[], object]] = {
        "status_ms": lambda: status.collect(pool.engine),
        "dead_list_ms": lambda: dead.list_dead(pool),
        "depth_sample_ms": depth,
    }
    out: dict[str, list[float]] = {name: [] for name in paths}
    for name, call in paths.items():
        call()
        for _ in range(repeats):
            started = time.perf_counter()
            call()
            out[name].append((time.perf_counter() - started) * 1000.0)
    return out
