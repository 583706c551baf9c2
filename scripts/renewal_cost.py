"""What the worker's renewal of its main connection costs (``MAIN_CONNECTION_LIFETIME``).

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/renewal_cost.py [--pairs 40] [--passes 20]

On a scratch database of that server, a worker's ``Session`` runs one-statement claim passes
(an empty queue: the claim and its planning, nothing to run). For each pair it times
``--passes`` passes on the kept connection, then drops it and times the same passes on a new
one, checkout included. Prints the median wall time and the mean CPU of the server backend
(``/proc/<pid>/schedstat``, so the server must run on this machine) of both; the difference is
what one renewal costs, once a minute per worker child. The postmaster's fork of the new
backend is not counted. Drops the scratch database at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import app  # noqa: E402
from bench.capacity import backend_cpu_s  # noqa: E402
from bench.database import BenchDatabase  # noqa: E402
from workerpool import sql as queries  # noqa: E402
from workerpool.client import database_url  # noqa: E402
from workerpool.runtime.worker.session import Session  # noqa: E402


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=positive, default=40)
    parser.add_argument("--passes", type=positive, default=20)
    args = parser.parse_args()
    with BenchDatabase(database_url()) as bench_db:
        pool = app.make_pool(bench_db.url)
        session = Session(bench_db.url, app.QUEUE, concurrency=1)
        session.open()
        versions = pool.registry.task_versions(app.QUEUE)

        def timed_passes() -> tuple[float, float]:
            started = time.perf_counter()
            with session.single_statement() as conn:
                pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            cpu = backend_cpu_s(pid)
            for _ in range(args.passes):
                with session.single_statement() as conn:
                    queries.claim(
                        conn, queue=app.QUEUE, worker="w", limit=10, task_versions=versions
                    )
            return (time.perf_counter() - started) * 1000, (backend_cpu_s(pid) - cpu) * 1000

        timed_passes()  # the kept connection prepares its claim first
        kept, new = [], []
        for _ in range(args.pairs):
            kept.append(timed_passes())
            session._drop_main_connection()
            new.append(timed_passes())
        for name, runs in (("kept connection", kept), ("new connection", new)):
            print(
                f"{name}: {args.passes} passes, wall median"
                f" {statistics.median(ms for ms, _ in runs):.2f} ms, server CPU mean"
                f" {statistics.mean(cpu for _, cpu in runs):.2f} ms"
            )
        session.close()
        pool.dispose()


if __name__ == "__main__":
    main()
