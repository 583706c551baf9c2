"""The history table at size (``--only history --history N``): the hot paths with N finished rows
in the history against the same with an empty history, and the retention's partition drop.

Each of two databases (the run's own, and a second scratch one with an empty history) gets the
history's partitions over 30 days back (the maintenance child's own upkeep, retention 31 days)
and the same due backlog for the claims; the run's own then gets N finished rows straight into
the history (one set-based INSERT, spread evenly over the 30 days, ids from the jobs table's
sequence), counted by the minute as the mover counts them, and each partition VACUUM ANALYZEd,
as autovacuum would: the partitioned parent is never analysed. The rounds alternate between
the two, so a shared machine's load reaches both.

Timed, median of the rounds: the claim (a transaction around ``queries.claim``, 10 rows),
``workerpool status`` (``status.collect``), the dashboard overview (GET /), and a result read
(``pool.job``: of a moved job, or of a done job in the jobs table when the history is empty).
Last, the drop of one full day's partition (``sql.history.drop_partition``, in its transaction:
the second oldest, as the oldest holds only part of a day).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from workerpool import WorkerPool
from workerpool.model.specs import MaintenanceSpec
from workerpool.ops import status
from workerpool.runtime.maintenance.history import HistoryKeeper
from workerpool.sql import history as history_sql

from . import scale, web
from .app import QUEUE, make_pool, noop
from .database import BenchDatabase
from .report import Report, Target, percentile

log = logging.getLogger("workerpool.bench")

DAYS = 30
CLAIM_LIMIT = 10
PATHS = ("claim", "status", "overview", "result")
#: The upkeep the bench runs: partitions from the day DAYS back to tomorrow.
SETTINGS = MaintenanceSpec(retention=DAYS * 86400.0, history_ahead=1)


def declare(report: Report, rows: int) -> None:
    for path in PATHS:
        report.declare(f"history_empty_{path}_p50_ms", "ms", note=f"{path}, empty history")
        report.declare(
            f"history_full_{path}_p50_ms",
            "ms",
            ratio_to=f"history_empty_{path}_p50_ms",
            target=Target("<=", 1.5, on_ratio=True),
            note=f"{path}, {rows:,} finished rows in the history",
        )
    report.declare(
        "history_drop_day_ms",
        "ms",
        target=Target("<=", 1000),
        note=f"DROP of one day's partition (~{rows // DAYS:,} rows)",
    )


def keep_partitions(pool: WorkerPool) -> None:
    def transaction():
        return pool.engine.begin()

    HistoryKeeper(transaction, SETTINGS).keep_partitions()


def fill(bench_db: BenchDatabase, rows: int) -> None:
    """``rows`` done rows straight into the history, evenly over the last DAYS days, and their
    finished minutes."""
    started = time.monotonic()
    bench_db.sql(
        "INSERT INTO workerpool_jobs_history (id, queue, task, payload, payload_version, state,"
        " priority, run_at, attempts, crashes, max_attempts, claimed_by, claimed_at, errors,"
        " replays, created_at, finished_at, result, has_dependents)"
        " SELECT nextval(pg_get_serial_sequence('workerpool_jobs', 'id')), %s, %s, '{}', 1,"
        " 'done', 0, f, 1, 0, 5, 'bench:history', f, '[]', '[]', f, f, to_jsonb(n), false"
        " FROM generate_series(1, %s) AS n,"
        " LATERAL (SELECT now() - make_interval(secs => n::float8 * %s * 86400.0 / %s)) AS t(f)",
        (QUEUE, noop.__name__, rows, DAYS, rows + 1),
    )
    bench_db.sql(  # what the mover counts as it moves (sql.history.move)
        "INSERT INTO workerpool_finished_minutes (minute, queue, state, count)"
        " SELECT date_trunc('minute', finished_at), queue, state, count(*)"
        " FROM workerpool_jobs_history GROUP BY 1, 2, 3"
    )
    bench_db.sql("ANALYZE workerpool_finished_minutes")
    for (name,) in bench_db.sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'workerpool_jobs_history'::regclass"
    ):
        bench_db.sql(f"VACUUM ANALYZE {name}")
    log.info("history: %d rows filled and vacuumed in %.1f s", rows, time.monotonic() - started)


def result_read_ms(pool: WorkerPool, job_id: int, reads: int = 50) -> list[float]:
    pool.job(job_id)
    out = []
    for _ in range(reads):
        started = time.perf_counter()
        if pool.job(job_id).state != "done":
            raise RuntimeError(f"job {job_id} is not done")
        out.append((time.perf_counter() - started) * 1000.0)
    return out


def timed_ms(call: Callable[[], object], times: int = 10) -> list[float]:
    call()
    out = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000.0)
    return out


class HistoryBench:
    """``run(rows)``: the figures above into ``report``."""

    def __init__(
        self,
        bench_db: BenchDatabase,
        pool: WorkerPool,
        report: Report,
        *,
        claims: int,
        repeats: int,
    ) -> None:
        self.db, self.pool, self.report = bench_db, pool, report
        self.claims, self.repeats = claims, repeats

    def run(self, rows: int) -> None:
        with BenchDatabase(self.db.server_url) as empty_db:
            empty_pool = make_pool(empty_db.url)
            try:
                targets = {"empty": (empty_db, empty_pool), "full": (self.db, self.pool)}
                reads = {name: self.prepare(db, pool) for name, (db, pool) in targets.items()}
                fill(self.db, rows)
                reads["full"] = self.db.sql(
                    "SELECT id FROM workerpool_jobs_history ORDER BY finished_at LIMIT 1 OFFSET %s",
                    (rows // 2,),
                )[0][0]
                self.alternate({name: pool for name, (_, pool) in targets.items()}, reads)
                self.drop_one_day()
            finally:
                empty_pool.dispose()

    def prepare(self, bench_db: BenchDatabase, pool: WorkerPool) -> int:
        """Partitions, a due backlog, and one done job in the jobs table; returns its id."""
        bench_db.reset()
        keep_partitions(pool)
        bench_db.load_pending(
            QUEUE, noop.__name__, scale.rows_needed(self.claims, CLAIM_LIMIT, self.repeats)
        )
        bench_db.load_finished(QUEUE, noop.__name__, 1)
        bench_db.vacuum()
        return bench_db.sql("SELECT id FROM workerpool_jobs WHERE state = 'done'")[0][0]

    def alternate(self, pools: dict[str, WorkerPool], reads: dict[str, int]) -> None:
        for pool in pools.values():
            scale.warm_up(pool, CLAIM_LIMIT)
        order = list(pools)
        for repeat in range(self.repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:
                pool = pools[name]
                samples = {
                    "claim": scale.claim_latencies_ms(pool, self.claims, CLAIM_LIMIT),
                    "status": timed_ms(lambda pool=pool: status.collect(pool.engine)),
                    "overview": web.overview_latencies_ms(pool, 10),
                    "result": result_read_ms(pool, reads[name]),
                }
                for path, values in samples.items():
                    p50 = percentile(values, 50)
                    self.report.add(f"history_{name}_{path}_p50_ms", p50)
                    log.info("history %s: %s p50 %.3f ms", name, path, p50)

    def drop_one_day(self) -> None:
        with self.pool.engine.begin() as conn:
            day = history_sql.partitions(conn)[1]
            started = time.perf_counter()
            history_sql.drop_partition(conn, day)
        elapsed = (time.perf_counter() - started) * 1000.0
        self.report.add("history_drop_day_ms", elapsed)
        log.info("history: dropped %s in %.1f ms (commit included)", day.name, elapsed)


__all__ = ["HistoryBench", "declare", "fill"]
