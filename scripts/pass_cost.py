"""What one pass of a draining worker costs, statement by statement, against the ceiling's two.

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/pass_cost.py [--rows 137] [--passes 200]

Creates a scratch database with enough no-op jobs, then, on one thread with nothing else
running in the process, repeats a worker's pass as the main loop sends it (BEGIN, the outcome
write of the rows the previous pass claimed, the claim of ``--rows`` more, COMMIT) and, on a
plain psycopg connection, the ceiling loop's two autocommit statements (``bench/ceiling.py``:
claim, complete). Prints the median wall time and client CPU of each; wall minus CPU is about
the server's time and the round trips. Drops the scratch database at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import enqueue
from bench.app import QUEUE, make_pool
from bench.ceiling import CLAIM_SQL, COMPLETE_SQL
from bench.database import BenchDatabase, libpq
from workerpool import sql
from workerpool.model.attempt import DONE
from workerpool.model.job import Lease
from workerpool.runtime.worker.outcomes import record_settling
from workerpool.runtime.worker.session import Session

SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
WARMUP = 5  # passes not counted: the statements are prepared on the server after the fifth


class Timings:
    """Wall and thread-CPU seconds of each named step, one sample per pass."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float]]] = {}

    def timed(self, name: str, counted: bool, call):
        wall, cpu = time.perf_counter(), time.thread_time()
        result = call()
        if counted:
            sample = (time.perf_counter() - wall, time.thread_time() - cpu)
            self.samples.setdefault(name, []).append(sample)
        return result

    def report(self) -> None:
        for name, samples in self.samples.items():
            wall = statistics.median(s[0] for s in samples) * 1e3
            cpu = statistics.median(s[1] for s in samples) * 1e3
            print(f"{name:<34} wall {wall:6.2f} ms   client CPU {cpu:5.2f} ms")


def worker_passes(
    session: Session, versions: dict[str, int], rows: int, passes: int, timings: Timings
) -> None:
    claimed: list = []

    def one_pass(counted: bool) -> list:
        with session.transaction() as conn:
            if claimed:
                leases = [(Lease(row.id, row.attempts, "pass-cost"), DONE) for row in claimed]
                timings.timed(
                    "worker: outcome write",
                    counted,
                    lambda: record_settling(conn, "pass-cost", leases),
                )
            return timings.timed(
                "worker: claim",
                counted,
                lambda: sql.claim(
                    conn,
                    queue=QUEUE,
                    worker="pass-cost",
                    limit=rows,
                    task_versions=versions,
                ),
            )

    for number in range(passes):
        counted = number >= WARMUP
        claimed = timings.timed(
            "worker: the pass (BEGIN ... COMMIT)", counted, lambda: one_pass(counted)
        )


def ceiling_passes(dsn: str, rows: int, passes: int, timings: Timings) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids: list[int] = []
        for number in range(passes):
            counted = number >= WARMUP
            if ids:
                timings.timed(
                    "ceiling: complete",
                    counted,
                    lambda: conn.execute(COMPLETE_SQL, {"ids": ids, "me": "ceiling"}),
                )
            got = timings.timed(
                "ceiling: claim",
                counted,
                lambda: conn.execute(
                    CLAIM_SQL, {"queue": QUEUE, "me": "ceiling", "limit": rows}
                ).fetchall(),
            )
            ids = [row[0] for row in got]


def main(rows: int, passes: int) -> None:
    server = make_url(os.environ.get("WORKERPOOL_DATABASE_URL", SERVER))
    with BenchDatabase(server.set(drivername="postgresql+psycopg")) as bench_db:
        pool = make_pool(bench_db.url)
        enqueue.load_for_drain(pool, 2 * rows * passes)
        bench_db.vacuum()
        session = Session(bench_db.url, QUEUE, concurrency=100)
        session.open()
        timings = Timings()
        try:
            worker_passes(session, pool.registry.task_versions(QUEUE), rows, passes, timings)
            ceiling_passes(libpq(bench_db.url), rows, passes, timings)
        finally:
            session.close()
            pool.dispose()
        print(f"medians of {passes - WARMUP} passes of {rows} rows:")
        timings.report()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=137, help="rows per claim")
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    main(args.rows, args.passes)
