"""Pickup latency: enqueue -> handler start, with LISTEN/NOTIFY on and off.

    WORKERPOOL_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python scripts/pickup_latency.py [--jobs 200] [--poll 1.0]

Creates a scratch database on that server, runs one worker process (concurrency 4) per mode,
enqueues jobs one at a time with random gaps (so the worker is idle when each arrives: this
measures wake-up, not queueing), and prints p50/p99/max of handler start minus (a) the moment
``enqueue()`` was called and (b) the moment it returned (committed). Both ends are read from the
same machine's wall clock. Drops the scratch database at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.database import BenchDatabase  # noqa: E402
from workerpool import Job, WorkerPool  # noqa: E402
from workerpool.client import database_url  # noqa: E402


def build_pool(url: str, *, notify: bool, poll: float) -> WorkerPool:
    pool = WorkerPool(url, notify=notify)
    pool.queue("latency", concurrency=4, poll_interval=poll)

    @pool.task(queue="latency")
    def stamp(job: Job) -> None:
        started = time.time()
        with open(os.environ["LATENCY_OUT"], "a") as out:
            out.write(f"{job.id} {started:.6f}\n")

    return pool


def run_worker(url: str, notify: bool, poll: float) -> int:
    from workerpool.runtime.worker import Worker

    pool = build_pool(url, notify=notify, poll=poll)
    worker = Worker(pool.registry, pool.url, "latency")
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    return worker.run()


def measure(url: str, *, notify: bool, jobs: int, poll: float) -> tuple[list[float], list[float]]:
    """Latencies in seconds: (from the enqueue call, from its return), one per job."""
    with tempfile.NamedTemporaryFile("r", suffix=".latency") as out:
        env = {**os.environ, "LATENCY_OUT": out.name, "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                url,
                "--notify",
                "on" if notify else "off",
                "--poll",
                str(poll),
            ],
            env=env,
        )
        pool = build_pool(url, notify=notify, poll=poll)
        sent: dict[int, tuple[float, float]] = {}
        try:
            wait_for_worker(pool)
            for _ in range(jobs):
                time.sleep(random.uniform(0.02, 0.08))
                called = time.time()
                job_id = pool.enqueue("stamp", {})
                sent[job_id] = (called, time.time())
            deadline = time.monotonic() + 30
            while len(out.read().splitlines()) < jobs and time.monotonic() < deadline:
                out.seek(0)
                time.sleep(0.05)
            out.seek(0)
            started = {int(i): float(t) for i, t in (line.split() for line in out)}
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
            pool.dispose()
    return ([started[i] - sent[i][0] for i in started], [started[i] - sent[i][1] for i in started])


def wait_for_worker(pool: WorkerPool) -> None:
    deadline = time.monotonic() + 20
    with pool.engine.connect() as conn:
        while time.monotonic() < deadline:
            if conn.exec_driver_sql("SELECT count(*) FROM workerpool_workers").scalar():
                time.sleep(0.5)  # let the listener subscribe too
                return
            conn.rollback()
            time.sleep(0.05)
    raise SystemExit("the worker did not register within 20 s")


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", metavar="URL")
    parser.add_argument("--notify", choices=["on", "off"], default="on")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()
    if args.worker:
        sys.exit(run_worker(args.worker, args.notify == "on", args.poll))

    with BenchDatabase(database_url()) as scratch:
        text_url = scratch.url.render_as_string(hide_password=False)
        for notify in (True, False):
            called, committed = measure(text_url, notify=notify, jobs=args.jobs, poll=args.poll)
            for label, latencies in (("enqueue call", called), ("commit", committed)):
                ms = [1000 * x for x in latencies]
                print(
                    f"notify={'on ' if notify else 'off'} poll={args.poll:g}s jobs={len(ms)} "
                    f"from {label:12}: p50 {percentile(ms, 50):7.1f} ms   "
                    f"p99 {percentile(ms, 99):7.1f} ms   max {max(ms):7.1f} ms",
                    flush=True,
                )


if __name__ == "__main__":
    main()
