"""The worker runtime in-process (threads), against real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import wait_until
from workerpool import Permanent, RetryLater, WorkerPool
from workerpool.worker import Worker


@contextmanager
def running(pool: WorkerPool, queue: str, **kwargs) -> Iterator[Worker]:
    worker = Worker(pool, queue, **kwargs)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive()


def states(sql) -> dict[str, int]:
    return dict(sql("SELECT state, count(*) FROM workerpool_jobs GROUP BY state"))


def test_concurrency_overlaps_jobs(pool, sql):
    pool.queue("q", concurrency=4, poll_interval=0.05)
    active, peak, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(4, timeout=10)

    @pool.task(queue="q")
    def overlap(job):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        gate.wait()  # only passes if four handlers run at once
        with lock:
            active[0] -= 1

    pool.enqueue_many([("overlap", {"n": i}) for i in range(8)])
    with running(pool, "q"):
        wait_until(lambda: states(sql) == {"done": 8}, 20, message="8 jobs done")
    assert peak[0] == 4


def test_notification_wakes_an_idle_worker_long_before_the_poll(pool, sql):
    pool.queue("q", poll_interval=30)
    started: list[float] = []
    pool.task(queue="q", name="ping")(lambda job: started.append(time.monotonic()))
    with running(pool, "q") as worker:
        wait_until(lambda: worker._listener and worker._listener.connected.is_set(), 10,
                   message="listener connected")
        wait_until(lambda: worker.counters.claimed == 0 and worker._wake.is_set() is False, 5)
        sent = time.monotonic()
        pool.enqueue("ping", {})
        wait_until(lambda: started, 10, message="job started")
    assert started[0] - sent < 10  # far below the 30 s poll interval


def test_without_notifications_the_poll_still_finds_the_job(pool, sql):
    pool.queue("q", poll_interval=0.1, notify=False)
    pool.task(queue="q", name="ping")(lambda job: None)
    with running(pool, "q") as worker:
        assert worker._listener is None
        pool.enqueue("ping", {})
        wait_until(lambda: states(sql) == {"done": 1}, 10, message="job done by polling")


def test_every_outcome_path(pool, sql):
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok")(lambda job: None)

    @pool.task(queue="q", name="boom", max_attempts=3)
    def boom(job):
        raise ValueError("boom")

    @pool.task(queue="q", name="perm")
    def perm(job):
        raise Permanent("422")

    @pool.task(queue="q", name="later")
    def later(job):
        raise RetryLater(3600)

    ids = {name: pool.enqueue(name, {}) for name in ("ok", "boom", "perm", "later")}
    with running(pool, "q"):
        wait_until(lambda: sql(
            "SELECT count(*) FROM workerpool_jobs WHERE state IN ('done', 'failed', 'dead')"
            " OR run_at > now() + interval '50 minutes'") == [(4,)], 10, message="4 outcomes")
    rows = {r[0]: r[1:] for r in sql(
        "SELECT id, state, dead_reason, attempts, jsonb_array_length(errors) FROM workerpool_jobs")}
    assert rows[ids["ok"]] == ("done", None, 1, 0)
    assert rows[ids["boom"]] == ("failed", None, 1, 1)
    assert rows[ids["perm"]] == ("dead", "permanent", 1, 1)
    assert rows[ids["later"]] == ("pending", None, 0, 0)


def test_timeout_is_a_failure_and_a_stuck_handler_recycles_the_worker(pool, sql, monkeypatch):
    monkeypatch.setattr("workerpool.worker.RECYCLE_GRACE", 0.3)
    pool.queue("q", poll_interval=0.05)
    release = threading.Event()

    @pool.task(queue="q", timeout=0.2, max_attempts=2)
    def stuck(job):
        release.wait(20)

    pool.enqueue("stuck", {})
    worker = Worker(pool, "q")
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run()), daemon=True)
    thread.start()
    wait_until(lambda: code, 15, message="worker to exit for recycling")
    release.set()
    assert code == [75]
    state, errors = sql("SELECT state, errors FROM workerpool_jobs")[0]
    assert state == "failed"
    assert errors[0]["type"] == "TimeoutError"


def test_drain_releases_jobs_that_outlive_the_drain_timeout(pool, sql):
    pool.queue("q", poll_interval=0.05, drain_timeout=0.3)
    release = threading.Event()

    @pool.task(queue="q")
    def slow(job):
        job.checkpoint({"step": 1})
        release.wait(20)

    pool.enqueue("slow", {})
    with running(pool, "q") as worker:
        wait_until(lambda: sql("SELECT checkpoint FROM workerpool_jobs")[0][0], 10)
    release.set()
    assert worker.counters.released == 1
    state, attempts, checkpoint, errors = sql(
        "SELECT state, attempts, checkpoint, errors FROM workerpool_jobs")[0]
    assert (state, attempts, checkpoint) == ("pending", 0, {"step": 1})
    assert errors[-1]["type"] == "Interrupted"


def test_worker_releases_its_predecessors_claims_at_boot(pool, sql):
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="ok", max_attempts=1)(lambda job: None)
    pool.task(queue="q", name="ok2", max_attempts=3)(lambda job: None)
    sql("INSERT INTO workerpool_jobs (queue, task, state, attempts, max_attempts, claimed_by,"
        " claimed_at) VALUES ('q','ok','processing',1,1,'dead:1:x', now()),"
        " ('q','ok2','processing',1,3,'dead:1:x', now())")
    with running(pool, "q", orphans=("dead:1:x",)):
        wait_until(lambda: states(sql) == {"dead": 1, "done": 1}, 10)
    assert sql("SELECT task, attempts FROM workerpool_jobs WHERE state='done'") == [("ok2", 2)]
    assert sql("SELECT dead_reason FROM workerpool_jobs WHERE state='dead'") == [("abandoned",)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_handlers_do_not_hold_a_transaction_open(pool, sql, kind):
    pool.queue("q", poll_interval=0.05)
    inside = threading.Event()
    release = threading.Event()

    if kind == "sync":
        @pool.task(queue="q", name="hold")
        def hold(job):
            inside.set()
            release.wait(20)
    else:
        import asyncio

        @pool.task(queue="q", name="hold")
        async def hold(job):
            inside.set()
            while not release.is_set():
                await asyncio.sleep(0.01)

    pool.enqueue("hold", {})
    with running(pool, "q"):
        wait_until(inside.is_set, 10)
        idle_in_tx = sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND application_name LIKE 'workerpool%%'"
                         " AND state LIKE 'idle in transaction%%'")
        release.set()
        wait_until(lambda: states(sql) == {"done": 1}, 10)
    assert idle_in_tx == [(0,)]
