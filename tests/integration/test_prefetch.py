"""Prefetch: a worker holds up to ``concurrency + prefetch`` claimed jobs (Worker on a thread).

What must keep holding with a buffer: it is bounded, it runs in priority order, a job's timeout
starts when its handler starts, renewal covers buffered jobs, and a drain gives unstarted jobs
back at once (attempt refunded, no error entry) while the running one gets the drain timeout.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers.db import job_row, states
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import WorkerPool
from workerpool.model import exitcodes
from workerpool.model.errors import ConfigError
from workerpool.runtime.worker import Worker


def processing(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'")[0][0]


def test_the_buffer_is_bounded_and_jobs_run_in_priority_order(pool, sql):
    pool.queue("q", concurrency=1, prefetch=3, poll_interval=0.05)
    order, held, gate = [], [], threading.Event()

    @pool.task(queue="q")
    def ranked(job):
        held.append(processing(sql))
        order.append(job.priority)
        gate.wait(20)

    priorities = [3, -7, 12, 0, 5, -1, 9, 2, 7, -4]
    for priority in priorities:
        pool.enqueue("ranked", {}, priority=priority)
    with running(pool, "q"):
        wait_until(lambda: processing(sql) == 4, 10, message="1 running + 3 buffered")
        gate.set()
        wait_until(lambda: states(sql) == {"done": 10}, 20, message="10 jobs done")
    assert max(held) == 4  # never more than concurrency + prefetch rows held
    assert order == sorted(priorities, reverse=True)


def test_a_timeout_starts_when_the_handler_starts_not_at_claim(pool, sql):
    pool.queue("q", concurrency=1, prefetch=3, poll_interval=0.05)
    held: list[int] = []

    @pool.task(queue="q", timeout=1.0, max_attempts=1)
    def steady(job):
        held.append(processing(sql))
        time.sleep(0.4)  # the job's own work: 4 x 0.4 s from one claim exceeds 1 s

    pool.enqueue_many([("steady", {}) for _ in range(4)])
    with running(pool, "q") as worker:
        wait_until(lambda: states(sql) == {"done": 4}, 20, message="4 jobs done")
    assert held[0] == 4  # all four came in one claim
    assert worker.counters.timeouts == 0


def test_a_drain_gives_unstarted_jobs_back_at_once(pool, sql):
    pool.queue("q", concurrency=1, prefetch=3, poll_interval=0.05, drain_timeout=30)
    runs, release = [], threading.Event()

    @pool.task(queue="q")
    def blocking(job):
        runs.append(job.id)
        release.wait(20)

    ids = pool.enqueue_many([("blocking", {}) for _ in range(4)])
    before = dict(sql("SELECT id, run_at FROM workerpool_jobs"))
    worker = Worker(pool.registry, pool.url, "q")
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run()), daemon=True)
    thread.start()
    try:
        wait_until(lambda: processing(sql) == 4 and runs, 10, message="1 running + 3 buffered")
        worker.stop()
        buffered = [i for i in ids if i not in runs]
        # well before the 30 s drain timeout, while the running job is still running:
        wait_until(
            lambda: all(job_row(sql, i)["state"] == "pending" for i in buffered),
            5,
            message="buffered jobs given back",
        )
        assert job_row(sql, runs[0])["state"] == "processing"
    finally:
        release.set()
        thread.join(30)
    assert code == [exitcodes.OK] and len(runs) == 1
    assert job_row(sql, runs[0])["state"] == "done"
    for job_id in buffered:
        row = job_row(sql, job_id)
        assert (row["state"], row["attempts"], row["errors"]) == ("pending", 0, [])
    after = dict(sql("SELECT id, run_at FROM workerpool_jobs"))
    assert all(after[i] == before[i] for i in buffered)  # each keeps its place in line
    assert worker.counters.unstarted == 3 and worker.counters.released == 0


def test_renewal_covers_buffered_jobs(pool, sql):
    # stale_after well above a loaded machine's stalls: six xdist workers on two cores can
    # hold the first worker's renewal for most of a second, and the second would take over
    pool.queue("q", concurrency=1, prefetch=2, poll_interval=0.05, stale_after=1.5)
    runs, release = [], threading.Event()

    @pool.task(queue="q")
    def long_first(job):
        runs.append((job.id, job.attempt))
        release.wait(20)

    pool.enqueue_many([("long_first", {}) for _ in range(3)])
    with running(pool, "q") as first:
        wait_until(lambda: processing(sql) == 3 and runs, 10, message="1 running + 2 buffered")
        claimed = dict(sql("SELECT id, claimed_at FROM workerpool_jobs"))
        with running(pool, "q") as second:  # polls every 50 ms for stale rows
            wait_until(
                lambda: sql(
                    "SELECT bool_and(claimed_at > %s + interval '3.5 s') FROM workerpool_jobs",
                    min(claimed.values()),
                )[0][0],
                20,
                message="leases renewed well past stale_after",
            )
            assert second.counters.claimed == 0
            release.set()
            wait_until(lambda: states(sql) == {"done": 3}, 10, message="3 jobs done")
    assert first.counters.claimed == 3 and second.counters.claimed == 0
    assert sorted(attempt for _, attempt in runs) == [1, 1, 1]


@pytest.mark.parametrize("bad", [-1, 1001, True, 2.5, "5"])
def test_prefetch_must_be_an_int_within_bounds(bad):
    with pytest.raises(ConfigError, match="prefetch"):
        WorkerPool("postgresql://nobody@127.0.0.1:1/none").queue("q", prefetch=bad)
