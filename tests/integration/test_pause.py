"""Pause and resume, in-process against real PostgreSQL (two supervisors at once: in
tests/processes/test_cancel_processes.py)."""

from __future__ import annotations

import re
import threading

import pytest

from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import UnknownQueue, WorkerPool
from workerpool.ops import status


def ticking(pool: WorkerPool) -> tuple[list[int], threading.Event]:
    pool.queue("q", poll_interval=0.05)
    release = threading.Event()
    pool.task(queue="q", name="block")(lambda job: release.wait(20))
    pool.task(queue="q", name="noop")(lambda job: None)
    return [0], release


def test_a_paused_queue_claims_nothing_keeps_ticking_and_resumes(pool, sql):
    ticks, release = ticking(pool)
    running_job = pool.enqueue("block", {})
    with running(pool, "q", on_tick=lambda: ticks.__setitem__(0, ticks[0] + 1)) as worker:
        wait_until(
            lambda: job_row(sql, running_job)["state"] == "processing",
            10,
            message="the first job runs",
        )
        pool.pause("q", by="ops")
        wait_until(lambda: worker.pause.paused, 5, message="the worker sees the pause")
        waiting = pool.enqueue("noop", {})  # enqueue still works
        seen = ticks[0]
        wait_until(lambda: ticks[0] >= seen + 5, 10, message="ticks go on while paused")
        assert job_row(sql, waiting)["state"] == "pending"
        release.set()  # the running job finishes while paused
        wait_until(
            lambda: job_row(sql, running_job)["state"] == "done",
            10,
            message="the running job finishes",
        )
        data = status.collect(pool.engine)["queues"]["q"]
        assert data["paused"] and data["paused_by"] == "ops"
        assert re.search(
            r"^PAUSED .*\n.*\n  q\s+\S+ \S+\s+ops$",
            status.render(status.collect(pool.engine)),
            re.MULTILINE,
        )
        pool.resume("q")
        wait_until(
            lambda: job_row(sql, waiting)["state"] == "done",
            10,
            message="the resumed queue runs the waiting job",
        )
    assert status.collect(pool.engine)["queues"]["q"]["paused"] is False


def test_pausing_an_unknown_queue_names_the_known_ones(pool, sql):
    pool.queue("email")
    pool.queue("sms")
    with pytest.raises(UnknownQueue, match=r"unknown queue 'emial'; known queues: email, sms"):
        pool.pause("emial")
    with pytest.raises(UnknownQueue, match="queue name 'bad name' is invalid"):
        pool.pause("bad name")
    assert sql("SELECT count(*) FROM workerpool_queues") == [(0,)]


def test_without_an_app_the_known_queues_are_those_with_rows_or_workers(db_url, pool):
    pool.queue("email")
    pool.task(queue="email", name="send")(lambda job: None)
    pool.enqueue("send", {})
    bare = WorkerPool(db_url)
    try:
        bare.pause("email")
        with pytest.raises(UnknownQueue, match="known queues: email"):
            bare.pause("nope")
    finally:
        bare.dispose()
