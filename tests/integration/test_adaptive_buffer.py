"""The default prefetch buffer is sized to the handlers (Worker on a thread, real PostgreSQL).

Each scenario runs a warm-up of jobs whose handlers are fast (no-op) or slow (0.5 s), then
``hold`` jobs that block every handler slot; once the worker has made a few more passes, the
rows it holds in ``processing`` beyond its busy slots are its buffer. No timing is asserted:
the slow handler runs a hundred times longer than a claim takes even on a loaded machine.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from tests.helpers.db import states
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool.runtime.worker.buffer import MOST_PER_SLOT

CONCURRENCY = 2
SLOW = 0.5  # seconds: hundreds of claim round trips
HOLDS = CONCURRENCY * (2 + MOST_PER_SLOT) + 5  # more than any buffer here can take


def processing(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'")[0][0]


@dataclass
class Held:
    rows: int  # in processing while every handler slot is held
    size: int  # the buffer's size then


def hold_after_warm_up(pool, sql, *, seconds: float, warm_up: int, **settings) -> Held:
    pool.queue("q", concurrency=CONCURRENCY, poll_interval=0.05, **settings)
    started, gate, ticks = [], threading.Event(), []

    @pool.task(queue="q")
    def warm(job):
        time.sleep(job.payload["seconds"])

    @pool.task(queue="q")
    def hold(job):
        started.append(job.id)
        gate.wait(30)

    pool.enqueue_many([("warm", {"seconds": seconds}, {"priority": 10}) for _ in range(warm_up)])
    pool.enqueue_many([("hold", {}) for _ in range(HOLDS)])
    with running(pool, "q", on_tick=lambda: ticks.append(1)) as worker:
        try:
            wait_until(lambda: len(started) == CONCURRENCY, 30, message="every slot held")
            seen = len(ticks)
            wait_until(lambda: len(ticks) >= seen + 3, 10, message="three more passes")
            held = Held(processing(sql), worker.claims.buffer.size)
        finally:
            gate.set()
        wait_until(lambda: states(sql) == {"done": warm_up + HOLDS}, 30, message="all done")
    return held


def test_fast_handlers_get_a_buffer(pool, sql):
    held = hold_after_warm_up(pool, sql, seconds=0.0, warm_up=50)
    assert held.size == MOST_PER_SLOT * CONCURRENCY  # no-op handlers: the bound
    # claimed while every slot was busy: a full buffer, or one a refill short of full (the
    # buffer may have grown after its last claim; it claims again once half of it is free)
    refill = held.size // 2
    assert CONCURRENCY + held.size - refill < held.rows <= CONCURRENCY + held.size, held


def test_slow_handlers_get_none(pool, sql):
    held = hold_after_warm_up(pool, sql, seconds=SLOW, warm_up=3 * CONCURRENCY)
    assert (held.rows, held.size) == (CONCURRENCY, 0)


@pytest.mark.parametrize(("prefetch", "seconds"), [(0, 0.0), (3, SLOW)])
def test_an_explicit_prefetch_keeps_its_size(pool, sql, prefetch, seconds):
    held = hold_after_warm_up(
        pool, sql, seconds=seconds, warm_up=3 * CONCURRENCY, prefetch=prefetch
    )
    assert (held.rows, held.size) == (CONCURRENCY + prefetch, prefetch)


def test_a_queue_with_limits_gets_no_buffer(pool, sql):
    held = hold_after_warm_up(pool, sql, seconds=0.0, warm_up=50, global_concurrency=100)
    assert (held.rows, held.size) == (CONCURRENCY, 0)
