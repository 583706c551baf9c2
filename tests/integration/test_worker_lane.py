"""The pass on its lane: while handlers run, the worker's pass transaction goes to its own thread
(workerpool/runtime/worker/lane.py) and the main loop keeps the handlers fed (Worker on a thread).

What must keep holding: the prefetch bound on what the worker holds, each job run once with its
attempt counted at claim, suspects still claimed and run alone on the main loop, and a stop
while a pass is on the wire: the rows it took are given back unstarted, never run.
"""

from __future__ import annotations

import threading
import time

from tests.helpers.db import job_row, states
from tests.helpers.waiting import wait_until
from tests.helpers.workers import on_thread
from workerpool.model import exitcodes
from workerpool.runtime.worker import Worker


def held_by(sql, worker: Worker) -> int:
    return sql(
        "SELECT count(*) FROM workerpool_jobs WHERE state = 'processing' AND claimed_by = %s",
        worker.id,
    )[0][0]


def lane_passes(worker: Worker) -> list[int]:
    """Count the passes the worker sends on its lane (the list's length)."""
    sent: list[int] = []
    submit = worker.lane.submit

    def counted(call):
        sent.append(1)
        submit(call)

    worker.lane.submit = counted  # type: ignore[method-assign]
    return sent


def test_passes_go_on_the_lane_while_handlers_run_and_the_bound_holds(pool, sql):
    pool.queue("q", concurrency=3, prefetch=3, poll_interval=0.05)
    most, runs = [], []

    @pool.task(queue="q")
    def short(job):
        runs.append(job.id)
        time.sleep(0.005)

    ids = pool.enqueue_many([("short", {}) for _ in range(200)])
    worker = Worker(pool.registry, pool.url, "q")
    sent = lane_passes(worker)
    thread, code = on_thread(worker)
    deadline = time.monotonic() + 30
    try:
        while states(sql) != {"done": 200}:
            most.append(held_by(sql, worker))
            assert time.monotonic() < deadline, "the drain did not finish"
    finally:
        worker.stop()
        thread.join(30)
    assert code == [exitcodes.OK]
    assert sent, "no pass went on the lane"
    assert 0 < max(most) <= 6  # concurrency + prefetch, as when every pass ran on the main loop
    assert sorted(runs) == sorted(ids)  # each once
    assert sql("SELECT DISTINCT attempts FROM workerpool_jobs") == [(1,)]


def test_a_stop_while_a_pass_is_on_the_wire_gives_its_rows_back_unstarted(pool, sql):
    pool.queue("q", concurrency=2, prefetch=0, poll_interval=0.05, drain_timeout=30)
    release, runs = threading.Event(), []

    @pool.task(queue="q", name="slow", max_attempts=3)
    def slow(job):
        runs.append(job.id)
        release.wait(20)

    @pool.task(queue="q", name="quick", max_attempts=3)
    def quick(job):
        runs.append(job.id)

    first = pool.enqueue("slow", {}, priority=2)
    pool.enqueue("quick", {}, priority=1)
    later = pool.enqueue_many([("quick", {}) for _ in range(3)])
    worker = Worker(pool.registry, pool.url, "q")
    on_wire, go = threading.Event(), threading.Event()
    transact = worker.claims._transact

    def held_on_the_wire(plan):  # the lane's pass, held before it reaches the server
        if threading.current_thread().name.endswith("-pass"):
            on_wire.set()
            go.wait(20)
        return transact(plan)

    worker.claims._transact = held_on_the_wire  # type: ignore[method-assign]
    thread, code = on_thread(worker)
    try:
        wait_until(on_wire.is_set, 10, message="a pass on the lane while 'slow' runs")
        worker.stop()
        go.set()
        wait_until(
            lambda: held_by(sql, worker) == 1, 10, message="the lane's rows given back at once"
        )
        assert job_row(sql, first)["state"] == "processing"  # still running: drain_timeout
    finally:
        go.set()
        release.set()
        thread.join(30)
    assert code == [exitcodes.OK]
    assert job_row(sql, first)["state"] == "done"
    assert not set(runs) & set(later), "a row the stopped worker's lane claimed ran"
    for job_id in later:
        row = job_row(sql, job_id)
        assert (row["state"], row["attempts"], row["errors"]) == ("pending", 0, [])
    assert worker.counters.unstarted >= 1


def test_a_suspect_is_claimed_and_run_alone_on_the_main_loop(pool, sql):
    pool.queue("q", concurrency=4, prefetch=4, poll_interval=0.05)
    company: list[int] = []

    @pool.task(queue="q")
    def job_(job):
        if job.payload.get("suspect"):
            company.append(held_by(sql, worker))
        time.sleep(0.002)

    pool.enqueue_many([("job_", {}) for _ in range(60)])
    suspect = pool.enqueue("job_", {"suspect": True}, priority=-1)
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE id = %s", suspect)
    worker = Worker(pool.registry, pool.url, "q")
    sent = lane_passes(worker)
    thread, code = on_thread(worker)
    try:
        wait_until(lambda: states(sql) == {"done": 61}, 20, message="all done")
    finally:
        worker.stop()
        thread.join(30)
    assert code == [exitcodes.OK]
    assert company == [1]  # nothing else held while it ran (a worker alone claims it first)
    assert sent, "no pass went on the lane"
