"""Maintenance cost: one idle pass, and pruning throughput.

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/maintenance_cost.py [--passes 200] [--rows 100000]

Creates a scratch database on that server, times ``Maintenance.run_pass()`` with one hourly cron
and one queue (nothing due: the steady-state cost every replica pays each second), then inserts
``--rows`` done rows older than the 7-day retention and as many recent ones, and times pruning
them in batches of 1000. Drops the scratch database at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.database import BenchDatabase
from workerpool import WorkerPool
from workerpool.client import database_url
from workerpool.runtime.maintenance import Maintenance


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with BenchDatabase(database_url()) as scratch:
        measure(scratch.url, args.passes, args.rows)


def measure(url, passes: int, rows: int) -> None:
    pool = WorkerPool(url)
    pool.queue("q")
    pool.cron("0 * * * *", queue="q", name="hourly")(lambda job: None)
    maintenance = Maintenance(pool.registry, pool.engine, worker_id="measure")
    maintenance.run_pass()
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        maintenance.run_pass()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(
        f"idle run_pass (1 cron, 1 queue): median {statistics.median(times):.2f} ms, "
        f"p95 {times[int(len(times) * 0.95) - 1]:.2f} ms over {passes} passes"
    )
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for age in ("8 days", "1 day"):
            conn.execute(
                "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
                " SELECT 'q', 'hourly', 'done', now() - %s::interval"
                " FROM generate_series(1, %s)",
                (age, rows),
            )
        conn.execute("ANALYZE workerpool_jobs")
    started, total = time.perf_counter(), 0
    while (deleted := maintenance.prune_finished()) > 0:
        total += deleted
    elapsed = time.perf_counter() - started
    print(
        f"pruned {total} of {2 * rows} rows (the old half) in {elapsed:.2f} s "
        f"= {total / elapsed:,.0f} rows/s, batches of 1000"
    )
    pool.dispose()


if __name__ == "__main__":
    main()
