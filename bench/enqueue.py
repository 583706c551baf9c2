"""Figure 4, enqueue: bulk ``enqueue_many`` rows/s and single transactional enqueues per second."""

from __future__ import annotations

import time

from workerpool import WorkerPool

from .app import QUEUE, noop

BULK_BATCH = 1000


def payloads(count: int, start: int = 0) -> list[tuple[str, dict]]:
    return [(noop.__name__, {"i": i}) for i in range(start, start + count)]


def bulk_rows_per_second(pool: WorkerPool, total: int, batch: int = BULK_BATCH) -> float:
    """``enqueue_many`` calls of ``batch`` jobs (one transaction each) until ``total`` rows."""
    batches = [payloads(min(batch, total - start), start) for start in range(0, total, batch)]
    started = time.perf_counter()
    for items in batches:
        pool.enqueue_many(items)
    return total / (time.perf_counter() - started)


def single_per_second(pool: WorkerPool, count: int) -> float:
    """One job per transaction, written in the caller's transaction (``conn=``), then committed."""
    started = time.perf_counter()
    for i in range(count):
        with pool.engine.begin() as conn:
            pool.enqueue(noop.__name__, {"i": i}, conn=conn)
    return count / (time.perf_counter() - started)


def load_for_drain(pool: WorkerPool, total: int, chunk: int = 5000) -> None:
    """``total`` no-op jobs in bulk, committed in one transaction so they appear together."""
    with pool.engine.begin() as conn:
        for start in range(0, total, chunk):
            pool.enqueue_many(payloads(min(chunk, total - start), start), conn=conn)


def warm_up(pool: WorkerPool) -> None:
    """Connect and compile the statements once, outside any timed window."""
    pool.enqueue_many(payloads(10))
    with pool.engine.begin() as conn:
        pool.enqueue(noop.__name__, {"warm": True}, conn=conn)


__all__ = ["QUEUE", "bulk_rows_per_second", "load_for_drain", "single_per_second", "warm_up"]
