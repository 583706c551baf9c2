"""Raw floors the issue's table compares against, beside the ceiling loop: pickup latency of a
plain psycopg LISTEN-and-claim loop, bulk COPY, and the cost of one ``workerpool healthcheck``.

The pickup floor does what an idle worker does with plain psycopg and nothing else: a spawned
process LISTENs on the jobs channel, and on each notification claims up to 10 due rows (the
ceiling's claim, durable, autocommit) and stamps each claimed job with ``time.monotonic()``. The
producer inserts each job and sends the notification in one autocommit statement, 20 ms apart,
as the pickup figure's ``enqueue()`` does. Latency: the stamp minus the time before the insert.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from workerpool.process import heartbeat

from .ceiling import CLAIM_SQL, START_TIMEOUT

CHANNEL = "workerpool_jobs"
ENQUEUE_NOTIFY_SQL = (
    "WITH inserted AS (INSERT INTO workerpool_jobs (queue, task, payload) VALUES (%s, %s, %s)"
    " RETURNING id) SELECT (SELECT id FROM inserted), pg_notify(%s, %s)"
)
COPY_SQL = "COPY workerpool_jobs (queue, task, payload) FROM STDIN"


def _listen_and_claim(dsn: str, queue: str, count: int, ready, stamps) -> None:
    me = f"raw-pickup:{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        params = {"me": me, "queue": queue, "limit": 10}
        conn.execute(CLAIM_SQL, params)  # warm: plan and connection
        ready.set()
        seen: dict[int, float] = {}
        deadline = time.monotonic() + 120.0
        while len(seen) < count and time.monotonic() < deadline:
            # Claim after the generator ends: it holds the connection while it waits.
            if list(conn.notifies(timeout=1.0, stop_after=1)):
                for row in conn.execute(CLAIM_SQL, params).fetchall():
                    seen.setdefault(row[0], time.monotonic())
        stamps.put(seen)


def raw_pickup_ms(dsn: str, queue: str, task: str, count: int, gap_s: float) -> list[float]:
    """Latencies (ms) of ``count`` jobs picked up by the plain LISTEN-and-claim loop."""
    ctx = multiprocessing.get_context("spawn")
    ready, stamps = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_listen_and_claim, args=(dsn, queue, count, ready, stamps))
    proc.start()
    try:
        if not ready.wait(START_TIMEOUT):
            raise RuntimeError("the raw pickup loop did not start")
        sent: list[tuple[int, float]] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            first = time.monotonic()
            for i in range(count):
                pause = first + i * gap_s - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing is the measurement's design
                at = time.monotonic()
                job_id = conn.execute(
                    ENQUEUE_NOTIFY_SQL, (queue, task, json.dumps({"i": i}), CHANNEL, queue)
                ).fetchone()[0]
                sent.append((job_id, at))
        started = stamps.get(timeout=150)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    missing = [job for job, _ in sent if job not in started]
    if missing:
        raise RuntimeError(f"the raw pickup loop missed {len(missing)} of {count} jobs")
    return [(started[job] - at) * 1000.0 for job, at in sent]


def raw_copy_rows_per_second(
    dsn: str, queue: str, task: str, total: int, batch: int = 1000
) -> float:
    """The bulk floor: one autocommit ``COPY`` of ``batch`` rows at a time, until ``total``."""
    batches = [
        [json.dumps({"i": i}) for i in range(start, min(total, start + batch))]
        for start in range(0, total, batch)
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for payloads in batches:
            with conn.cursor().copy(COPY_SQL) as copy:
                for payload in payloads:
                    copy.write_row((queue, task, payload))
        return total / (time.perf_counter() - started)


def healthcheck_ms(runs: int = 10) -> list[float]:
    """Wall time of ``python -m workerpool healthcheck`` on a fresh heartbeat file (a Kubernetes
    exec probe pays all of it: the interpreter's start-up, the imports, a few ``stat`` calls)."""
    with tempfile.TemporaryDirectory(prefix="wp-bench-hb-") as directory:
        heartbeat.touch(heartbeat.path_for(Path(directory), "bench-child"))
        command = [sys.executable, "-m", "workerpool", "healthcheck", "--dir", directory]
        subprocess.run(command, check=True, capture_output=True)  # warm the file cache
        out = []
        for _ in range(runs):
            heartbeat.touch(heartbeat.path_for(Path(directory), "bench-child"))
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            out.append((time.perf_counter() - started) * 1000.0)
        return out
