"""Drain N no-op jobs with one in-process ``Worker`` on the bench's tuned queue, for a profiler.

    python scripts/profile_drain.py 50000
    py-spy record --gil -r 1000 -f raw -o drain.folded -- python scripts/profile_drain.py 50000

Creates a scratch database on ``$WORKERPOOL_DATABASE_URL`` (default: the local server), loads
the jobs as ``python -m bench`` does, runs the worker on the main thread until every job is done,
prints the rate (database clock) and this process's CPU per job, and drops the database. The
worker runs in this process, so py-spy and cProfile see its main loop and its handler threads.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import enqueue
from bench.app import QUEUE, make_pool
from bench.database import BenchDatabase
from workerpool.runtime.worker import Worker

SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def main(jobs: int) -> None:
    server = make_url(os.environ.get("WORKERPOOL_DATABASE_URL", SERVER))
    with BenchDatabase(server.set(drivername="postgresql+psycopg")) as bench_db:
        pool = make_pool(bench_db.url)
        enqueue.load_for_drain(pool, jobs)
        bench_db.vacuum()
        worker = Worker(pool.registry, bench_db.url, QUEUE)
        threading.Thread(target=_stop_when_done, args=(worker, jobs), daemon=True).start()
        cpu = time.process_time()
        worker.run()
        cpu = time.process_time() - cpu
        done, seconds = bench_db.drain_window()
        print(f"{done} jobs in {seconds:.3f} s: {done / seconds:.0f} jobs/s, "
              f"{cpu * 1e6 / jobs:.1f} us of CPU per job")
        pool.dispose()


def _stop_when_done(worker: Worker, jobs: int) -> None:
    while worker.counters.finished < jobs:
        time.sleep(0.01)
    worker.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
