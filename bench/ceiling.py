"""Figure 1, the ceiling: a plain psycopg loop doing what a worker's claim and completion do.

Each process opens one autocommit connection and repeats two transactions, as a worker would:
claim up to 100 due rows with ``FOR UPDATE SKIP LOCKED`` (returning what a handler needs), then
mark them done, fenced on the claimer. It runs on ``workerpool_jobs`` itself, loaded the same way
as for the drain, so the only difference from the drain is workerpool. The statements are
deliberately written by hand here (not taken from ``workerpool.sql``): this is the reference
the library is measured against.

Processes are spawned (never forked from a parent holding connections), connect, then wait on a
barrier so that they start claiming together.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.synchronize import Barrier

import psycopg

BATCH = 100
START_TIMEOUT = 60.0

CLAIM_SQL = """
UPDATE workerpool_jobs AS j
   SET state = 'processing', attempts = j.attempts + 1, claimed_by = %(me)s, claimed_at = now()
  FROM (SELECT id FROM workerpool_jobs
         WHERE queue = %(queue)s AND state IN ('pending', 'failed') AND run_at <= now()
         ORDER BY priority DESC, run_at, id
         LIMIT %(limit)s
         FOR UPDATE SKIP LOCKED) AS due
 WHERE j.id = due.id
RETURNING j.id, j.task, j.payload, j.attempts
"""

COMPLETE_SQL = """
UPDATE workerpool_jobs SET state = 'done', finished_at = now()
 WHERE id = ANY(%(ids)s) AND state = 'processing' AND claimed_by = %(me)s
"""


def claim_complete_loop(dsn: str, queue: str, limit: int, barrier: Barrier) -> None:
    """Claim and complete until a claim comes back empty (runs in a spawned process)."""
    me = f"ceiling:{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        barrier.wait(START_TIMEOUT)
        params = {"me": me, "queue": queue, "limit": limit}
        while True:
            rows = conn.execute(CLAIM_SQL, params).fetchall()
            if not rows:
                return
            conn.execute(COMPLETE_SQL, {"ids": [row[0] for row in rows], "me": me})


def run(
    dsn: str, queue: str, processes: int, *, limit: int = BATCH, timeout: float = 600.0
) -> None:
    """Drain ``queue`` with ``processes`` plain loops; returns when every loop has finished."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    procs = [
        ctx.Process(
            target=claim_complete_loop, args=(dsn, queue, limit, barrier), name=f"ceiling-{i}"
        )
        for i in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(START_TIMEOUT)
        for proc in procs:
            proc.join(timeout)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"ceiling loop(s) failed: {failed}")
