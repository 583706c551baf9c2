"""Cancel, in-process against real PostgreSQL: queued jobs, running ones (cooperative, via
checkpoint, async, without notifications), the race with a claim, and bad input.

The supervisor cases (a handler that ignores its cancel: recycle; PgBouncer; the CLI) are in
tests/processes/test_cancel_processes.py.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import Cancelled, ConfigError, UnknownJob, WorkerPool
from workerpool import sql as queries
from workerpool.model.cancel import CANCELLED, FINISHED, STOPPING
from workerpool.model.errors import InvalidFilter


def cancel_entry(sql, job_id: int) -> dict:
    errors = job_row(sql, job_id)["errors"]
    assert errors and errors[-1]["type"] == "Cancelled", errors
    return errors[-1]


def noop_task(pool: WorkerPool) -> None:
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="noop")(lambda job: None)


# -- queued jobs -----------------------------------------------------------------------------


def test_pending_and_failed_jobs_are_cancelled_at_once_with_who_and_why(pool, sql):
    noop_task(pool)
    pending = pool.enqueue("noop", {})
    failed = pool.enqueue("noop", {})
    sql(
        "UPDATE workerpool_jobs SET state = 'failed', attempts = 1,"
        " run_at = now() + interval '1 hour' WHERE id = %s",
        failed,
    )
    result = pool.cancel([pending, failed], reason="customer asked", by="ops@host")
    assert result.verdicts == {pending: CANCELLED, failed: CANCELLED}
    for job_id in (pending, failed):
        row = job_row(sql, job_id)
        assert row["state"] == "cancelled" and row["finished"]
        entry = cancel_entry(sql, job_id)
        assert entry["by"] == "ops@host" and entry["message"] == "customer asked" and entry["at"]


def test_cancelling_a_finished_job_changes_nothing_and_says_so(pool, sql):
    noop_task(pool)
    job_id = pool.enqueue("noop", {})
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", job_id)
    before = sql("SELECT * FROM workerpool_jobs WHERE id = %s", job_id)
    result = pool.cancel([job_id])
    assert result.verdicts == {job_id: FINISHED} and result.states == {job_id: "done"}
    assert sql("SELECT * FROM workerpool_jobs WHERE id = %s", job_id) == before


def test_unknown_ids_are_refused_by_name_and_nothing_is_written(pool, sql):
    noop_task(pool)
    known = pool.enqueue("noop", {})
    with pytest.raises(UnknownJob, match=r"unknown job id\(s\): 999998, 999999"):
        pool.cancel([known, 999998, 999999])
    assert job_row(sql, known)["state"] == "pending"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ids": []}, "no job ids"),
        ({"ids": [0]}, "positive integers"),
        ({"ids": [2**63]}, "positive integers"),
        ({"ids": None}, "job ids or a queue"),
        ({"ids": [1], "queue": "q"}, "job ids or a queue"),
        ({"ids": None, "queue": "q", "state": "done"}, "state must be one of pending, processing"),
        ({"ids": None, "queue": "no such"}, "queue name 'no such' is invalid"),
        ({"ids": [1], "reason": 5}, "reason must be a string"),
        ({"ids": [1], "reason": "x" * 1_000_000}, "reason must be at most 1000 characters"),
        ({"ids": [1], "reason": "a\x00b"}, "reason must not contain NUL"),
        ({"ids": [1], "reason": "a\ud800"}, "reason must not contain NUL or a lone surrogate"),
    ],
)
def test_bad_selections_are_refused_before_anything_is_read(pool, kwargs, match):
    with pytest.raises(InvalidFilter, match=match):
        pool.cancel(**kwargs)


def test_negative_cancel_grace_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"queue q: cancel_grace must be .* >= 0, got -1"):
        WorkerPool("postgresql://unused/x").queue("q", cancel_grace=-1)


def test_dry_run_and_queue_filters(pool, sql):
    noop_task(pool)
    pool.task(queue="q", name="other")(lambda job: None)
    a, b = pool.enqueue("noop", {}), pool.enqueue("noop", {})
    c = pool.enqueue("other", {})
    dry = pool.cancel(queue="q", task="noop", dry_run=True)
    assert dry.dry_run and dry.verdicts == {a: CANCELLED, b: CANCELLED}
    assert {job_row(sql, i)["state"] for i in (a, b, c)} == {"pending"}
    sql("UPDATE workerpool_jobs SET state = 'failed', attempts = 1 WHERE id = %s", b)
    assert pool.cancel(queue="q", state="failed").verdicts == {b: CANCELLED}
    assert [job_row(sql, i)["state"] for i in (a, b, c)] == ["pending", "cancelled", "pending"]


def test_on_cancel_hooks_see_each_cancelled_job(pool):
    noop_task(pool)
    seen = []
    pool.on_cancel(lambda notice: seen.append((notice.id, notice.task, notice.reason)))
    pool.on_cancel(lambda notice: 1 / 0)  # a failing hook is logged, never propagated
    job_id = pool.enqueue("noop", {})
    pool.cancel([job_id], reason="why")
    assert seen == [(job_id, "noop", "why")]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_on_cancel_hooks_in_the_callers_transaction_wait_for_its_commit(pool, sql, ending):
    noop_task(pool)
    job_id = pool.enqueue("noop", {})
    seen = []
    pool.on_cancel(lambda notice: seen.append(notice.id))
    with pool.engine.connect() as conn:
        with conn.begin() as transaction:
            pool.cancel([job_id], conn=conn)
            assert seen == []  # not yet: the caller may still roll it back
            getattr(transaction, ending)()
        with conn.begin():  # a later transaction on the same connection reports nothing more
            conn.exec_driver_sql("SELECT 1")
    if ending == "commit":
        assert seen == [job_id]
        assert job_row(sql, job_id)["state"] == "cancelled"
    else:
        assert seen == []
        assert job_row(sql, job_id)["state"] == "pending"


def test_a_job_claimed_in_the_same_instant_is_treated_as_running(pool, sql):
    """The cancel waits for the claim's row lock, re-reads the row and sees it processing."""
    noop_task(pool)
    job_id = pool.enqueue("noop", {})
    outcome = []
    with pool.engine.connect() as claimer:
        rows = queries.claim(
            claimer,
            queue="q",
            worker="w",
            limit=1,
            task_versions={"noop": 1},
        )
        assert [row.id for row in rows] == [job_id]  # claimed, not committed: the row is locked
        thread = threading.Thread(target=lambda: outcome.append(pool.cancel([job_id])))
        thread.start()
        wait_until(
            lambda: sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type"
                " = 'Lock' AND datname = current_database()"
            )[0][0],
            10,
            message="the cancel waits for the claim's lock",
        )
        claimer.commit()
        thread.join(10)
    assert outcome[0].verdicts == {job_id: STOPPING}
    row = sql("SELECT state, cancel_request IS NOT NULL FROM workerpool_jobs WHERE id = %s", job_id)
    assert row == [("processing", True)]


# -- running jobs ----------------------------------------------------------------------------


def run_and_cancel(pool, sql, task: str, **queue) -> tuple[int, float]:
    """Enqueue ``task``, wait until it runs, cancel it; returns the id and the latency until the
    handler reported it saw the cancel (``seen`` set by the task)."""
    job_id = pool.enqueue(task, {})
    with running(pool, "q") as worker:
        wait_until(
            lambda: job_row(sql, job_id)["state"] == "processing", 10, message="the job runs"
        )
        if worker.listener is not None:
            worker.listener.connected.wait(10)
        asked = time.monotonic()
        assert pool.cancel([job_id], reason="stop").verdicts == {job_id: STOPPING}
        wait_until(
            lambda: job_row(sql, job_id)["state"] == "cancelled",
            15,
            message="the row ends cancelled",
        )
        latency = SEEN[job_id] - asked
    assert job_row(sql, job_id)["finished"]
    assert cancel_entry(sql, job_id)["message"] == "stop"
    return job_id, latency


SEEN: dict[int, float] = {}


def cooperative_tasks(pool: WorkerPool, **queue) -> None:
    pool.queue("q", poll_interval=0.05, **queue)

    @pool.task(queue="q")
    def watches(job):
        job.cancelled.wait(30)
        SEEN[job.id] = time.monotonic()
        return "whatever it returns"

    @pool.task(queue="q")
    def checkpoints(job):
        while True:
            try:
                job.checkpoint()
            except Cancelled:
                SEEN[job.id] = time.monotonic()
                raise
            time.sleep(0.01)

    @pool.task(queue="q")
    async def awaits(job):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            SEEN[job.id] = time.monotonic()
            raise


@pytest.mark.parametrize("task", ["watches", "checkpoints", "awaits"])
def test_a_running_job_is_asked_to_stop_and_ends_cancelled(pool, sql, task):
    cooperative_tasks(pool)
    seen = []
    pool.on_cancel(seen.append)
    job_id, latency = run_and_cancel(pool, sql, task)
    assert latency < 5, latency  # a notification: well under a second on an idle machine
    assert [notice.id for notice in seen] == [job_id]


def test_without_notifications_the_cancel_arrives_by_polling(db_url, sql):
    pool = WorkerPool(db_url, notify=False)
    try:
        cooperative_tasks(pool)
        _, latency = run_and_cancel(pool, sql, "watches")
    finally:
        pool.dispose()
    assert latency < 10, latency


def test_renewal_reports_the_held_jobs_with_a_cancel_request(pool, sql):
    noop_task(pool)
    first, second = pool.enqueue("noop", {}), pool.enqueue("noop", {})
    with pool.engine.begin() as conn:
        rows = queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=2,
            task_versions={"noop": 1},
        )
    pool.cancel([second])
    leases = [(row.id, row.attempts) for row in rows]
    with pool.engine.begin() as conn:
        assert queries.renew_reading_cancels(conn, "w", leases) == ({first, second}, {second})


def test_a_job_that_fails_after_its_cancel_was_asked_ends_cancelled(pool, sql):
    """The failure is written before the worker learns of the cancel: the row still ends."""
    noop_task(pool)
    job_id = pool.enqueue("noop", {})
    with pool.engine.begin() as conn:
        row = queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=1,
            task_versions={"noop": 1},
        )[0]
    pool.cancel([job_id], reason="late")
    with pool.engine.begin() as conn:
        state = queries.fail(
            conn,
            queries.Lease(job_id, row.attempts, "w"),
            {"type": "ValueError", "message": "boom"},
            30,
        )
    assert state == "cancelled"
    found = job_row(sql, job_id)
    assert found["finished"] and [e["type"] for e in found["errors"]] == ["ValueError", "Cancelled"]
    assert found["errors"][-1]["message"] == "late"


def test_a_cancelled_job_whose_worker_died_stays_cancelled(pool, sql):
    noop_task(pool)
    job_id = pool.enqueue("noop", {})
    with pool.engine.begin() as conn:
        queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=1,
            task_versions={"noop": 1},
        )
    pool.cancel([job_id])
    with pool.engine.begin() as conn:
        queries.reclaim_from_dead_worker(conn, "w")
    found = job_row(sql, job_id)
    assert found["state"] == "cancelled" and found["finished"]
    assert [e["type"] for e in found["errors"]] == ["WorkerLost", "Cancelled"]


GIVE_BACKS = {
    "snooze": lambda conn, lease: queries.snooze(conn, lease, 30),
    "drain": lambda conn, lease: queries.give_back(conn, lease, {"type": "Interrupted"}),
    "unstarted": lambda conn, lease: queries.return_unstarted(
        conn, lease.worker, [(lease.job_id, lease.attempt)]
    ).get(lease.job_id),
}


@pytest.mark.parametrize("way", sorted(GIVE_BACKS))
def test_a_job_given_back_after_its_cancel_was_asked_ends_cancelled(pool, sql, way):
    """The give-back is written before the worker learns of the cancel: the job must not go
    back in line with the request forgotten (it would run again)."""
    noop_task(pool)
    job_id, bystander = pool.enqueue("noop", {}), pool.enqueue("noop", {})
    with pool.engine.begin() as conn:
        rows = queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=2,
            task_versions={"noop": 1},
        )
    attempts = {row.id: row.attempts for row in rows}
    pool.cancel([job_id], reason="stop it")
    with pool.engine.begin() as conn:
        assert GIVE_BACKS[way](conn, queries.Lease(job_id, attempts[job_id], "w")) == "cancelled"
        assert (
            GIVE_BACKS[way](conn, queries.Lease(bystander, attempts[bystander], "w")) == "pending"
        )
    found = job_row(sql, job_id)
    assert found["state"] == "cancelled" and found["finished"]
    assert found["attempts"] == 1  # it was claimed and not refunded: the attempt happened
    assert found["errors"][-1]["type"] == "Cancelled"
    assert found["errors"][-1]["message"] == "stop it"
    assert job_row(sql, bystander)["state"] == "pending"
