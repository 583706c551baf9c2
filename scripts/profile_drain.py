"""Drain N no-op jobs with one in-process ``Worker`` on the bench's tuned queue, for a profiler.

    python scripts/profile_drain.py 50000
    python scripts/profile_drain.py 50000 --steps
    python scripts/profile_drain.py 20000 --payload-bytes 16000
    py-spy record --gil -r 1000 -f raw -o drain.folded -- python scripts/profile_drain.py 50000

Creates a scratch database on ``$WORKERPOOL_DATABASE_URL`` (default: the local server), loads
the jobs as ``python -m bench`` does, runs the worker on the main thread until every job is done,
prints the rate (database clock) and this process's CPU per job, and drops the database. The
worker runs in this process, so py-spy and cProfile see its main loop and its handler threads.

``--payload-bytes N`` pads each job's payload with N characters of hex that does not compress
(past about 2 kB PostgreSQL then stores it out of line), written before the drain.

``--steps`` also times the main loop's steps (wall and thread CPU, per call): a pass, its claim,
its outcome write, the hand-off of each claimed job, the bookkeeping after the commit and the
wait between passes; and the main loop's share of the process's CPU. The timing wraps each call,
adding about a microsecond to each: compare such runs with each other only.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import enqueue
from bench.app import QUEUE, make_pool
from bench.database import BenchDatabase
from workerpool.runtime.worker import Worker, claims, loop, outcomes

SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"

#: The main loop's steps ``--steps`` times: (class, method).
STEPS = (
    (loop.Worker, "_pass"),
    (claims.Claims, "_claim"),
    (outcomes.Outcomes, "record"),
    (claims.Claims, "_start"),
    (outcomes.Outcomes, "written"),
    (loop.Worker, "_wait"),
)


#: Pads every job's payload with ``%(pad)s`` characters of md5s, none repeated.
PAD = (
    "UPDATE workerpool_jobs SET payload = payload || jsonb_build_object('pad', left((SELECT"
    " string_agg(md5((id * 100000 + g)::text), '') FROM generate_series(0, %(pad)s / 32) AS g),"
    " %(pad)s))"
)


def main(jobs: int, steps: bool, pad: int = 0) -> None:
    timed = _time_steps() if steps else None
    server = make_url(os.environ.get("WORKERPOOL_DATABASE_URL", SERVER))
    with BenchDatabase(server.set(drivername="postgresql+psycopg")) as bench_db:
        pool = make_pool(bench_db.url)
        enqueue.load_for_drain(pool, jobs)
        if pad:
            bench_db.sql(PAD, {"pad": pad})
        bench_db.vacuum()
        worker = Worker(pool.registry, bench_db.url, QUEUE)
        threading.Thread(target=_stop_when_done, args=(worker, jobs), daemon=True).start()
        cpu, main_cpu = time.process_time(), time.thread_time()
        worker.run()
        cpu, main_cpu = time.process_time() - cpu, time.thread_time() - main_cpu
        done, seconds = bench_db.drain_window()
        print(
            f"{done} jobs in {seconds:.3f} s: {done / seconds:.0f} jobs/s, "
            f"{cpu * 1e6 / jobs:.1f} us of CPU per job"
        )
        if timed is not None:
            _report(timed, jobs, cpu, main_cpu)
        pool.dispose()


def _time_steps() -> dict[str, list[float]]:
    """Wrap each of STEPS to add up its calls, wall and thread CPU."""
    timed: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])

    def wrap(cls: type, name: str) -> None:
        method, label = getattr(cls, name), f"{cls.__name__}.{name}"

        def timed_call(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                entry = timed[label]
                entry[0] += 1
                entry[1] += time.perf_counter() - wall
                entry[2] += time.thread_time() - cpu

        setattr(cls, name, timed_call)

    for cls, name in STEPS:
        wrap(cls, name)
    return timed


def _report(timed: dict[str, list[float]], jobs: int, cpu: float, main_cpu: float) -> None:
    print(
        f"main loop: {main_cpu * 1e6 / jobs:.1f} us of CPU per job; handler threads and the"
        f" rest: {(cpu - main_cpu) * 1e6 / jobs:.1f}"
    )
    print(
        f"{'step':<22}{'calls':>8}{'wall ms':>10}{'CPU ms':>10}{'wall/call us':>14}"
        f"{'CPU/job us':>12}"
    )
    for label, (calls, wall, spent) in timed.items():
        print(
            f"{label:<22}{calls:>8}{wall * 1e3:>10.1f}{spent * 1e3:>10.1f}"
            f"{wall * 1e6 / max(calls, 1):>14.1f}{spent * 1e6 / jobs:>12.2f}"
        )


def not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _stop_when_done(worker: Worker, jobs: int) -> None:
    while worker.counters.finished < jobs:
        time.sleep(0.01)
    worker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="?", type=int, default=50_000)
    parser.add_argument("--steps", action="store_true", help="time the main loop's steps")
    parser.add_argument("--payload-bytes", type=not_negative, default=0, help="pad each payload")
    args = parser.parse_args()
    main(args.jobs, args.steps, args.payload_bytes)
