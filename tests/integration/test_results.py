"""Results, in-process against real PostgreSQL: what a handler returns is written by the
completing UPDATE and read back by ``pool.result`` / ``pool.result_async`` / ``pool.job``,
for every way a job ends; the wake-up of waiters (LISTEN, and polling alone); bad input.

Jobs run either through a Worker on a thread of the test (the batched, fenced outcome path) or
through ``testing.drain`` (the same outcome code, one job at a time).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import event

from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import (
    Backoff,
    InvalidJob,
    JobCancelled,
    JobFailed,
    Permanent,
    ResultTimeout,
    UnknownJob,
    WorkerPool,
    testing,
)
from workerpool import sql as queries
from workerpool.client import results
from workerpool.model.attempt import Outcome
from workerpool.model.states import OutcomeKind
from workerpool.runtime.worker.outcomes import record_many
from workerpool.sql import results as results_sql

NO_RETRY = Backoff(base=0, cap=0, jitter=0)


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", poll_interval=0.05, cancel_grace=5)

    @pool.task(queue="q")
    def add(job):
        return job.payload["a"] + job.payload["b"]

    @pool.task(queue="q")
    async def add_async(job):
        await asyncio.sleep(0)
        return {"sum": job.payload["a"] + job.payload["b"], "items": [1, "two", None]}

    @pool.task(queue="q")
    def nothing(job):
        return None

    @pool.task(queue="q", max_attempts=2, backoff=NO_RETRY)
    def flaky(job):
        raise ConnectionError(f"down on attempt {job.attempt}")

    @pool.task(queue="q")
    def refuse(job):
        raise Permanent("422: not worth retrying")

    @pool.task(queue="q", max_attempts=1)
    def unserialisable(job):
        return {"when": object()}

    @pool.task(queue="q", max_attempts=1)
    def huge(job):
        return "x" * (pool.registry.payload_limit + 1)

    @pool.task(queue="q")
    def wait_for_cancel(job):
        job.cancelled.wait(20)

    @pool.task(queue="q", max_attempts=1, timeout=0.3)
    async def overrun(job):
        await asyncio.sleep(30)  # an async handler is cancelled at its timeout

    return pool


# -- every way a job ends -------------------------------------------------------------------------


def test_a_sync_handlers_return_value_is_the_result_written_by_the_worker(app):
    job_id = app.enqueue("add", {"a": 1, "b": 2})
    with running(app, "q"):
        assert app.result(job_id, timeout=30) == 3
    info = app.job(job_id)
    assert (info.state, info.result, info.attempts, info.errors) == ("done", 3, 1, [])
    assert info.finished and info.finished_at is not None


def test_an_async_handlers_return_value_is_the_result(app):
    job_id = app.enqueue("add_async", {"a": 2, "b": 5})
    with running(app, "q"):
        assert app.result(job_id, timeout=30) == {"sum": 7, "items": [1, "two", None]}


def test_result_async_waits_without_blocking_the_event_loop(app):
    job_id = app.enqueue("add", {"a": 20, "b": 22})

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        background = asyncio.create_task(ticker())
        try:
            result = await app.result_async(job_id, timeout=30)
        finally:
            background.cancel()
            await app.dispose_async()
        return result, ticks

    with running(app, "q"):
        result, ticks = asyncio.run(main())
    assert result == 42 and ticks > 1


def test_returning_nothing_stores_null_and_the_result_is_none(app, sql):
    job_id = app.enqueue("nothing", {})
    testing.drain(app)
    assert app.result(job_id, timeout=0) is None
    assert sql("SELECT result IS NULL FROM workerpool_jobs WHERE id = %s", job_id) == [(True,)]


def test_a_job_dead_after_its_attempts_raises_job_failed_with_its_history(app):
    job_id = app.enqueue("flaky", {})
    testing.drain(app, retries="now")
    with pytest.raises(JobFailed) as failed:
        app.result(job_id, timeout=5)
    assert failed.value.job_id == job_id and failed.value.reason == "exhausted"
    assert [e["message"] for e in failed.value.errors] == ["down on attempt 1", "down on attempt 2"]
    assert "ConnectionError: down on attempt 2" in str(failed.value)


def test_a_permanent_failure_raises_job_failed_at_once(app):
    job_id = app.enqueue("refuse", {})
    with running(app, "q"):
        with pytest.raises(JobFailed) as failed:
            app.result(job_id, timeout=30)
    assert failed.value.reason == "permanent"
    assert failed.value.errors[-1]["type"] == "Permanent"


def test_a_job_that_overran_its_timeout_on_its_last_attempt_raises_job_failed(app):
    job_id = app.enqueue("overrun", {})
    with running(app, "q"):
        with pytest.raises(JobFailed) as failed:
            app.result(job_id, timeout=30)
    assert failed.value.reason == "exhausted"
    assert failed.value.errors[-1]["type"] == "TimeoutError"


def test_a_cancelled_queued_job_raises_job_cancelled(app):
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    app.cancel([job_id], reason="not needed", by="ops")
    with pytest.raises(JobCancelled) as cancelled:
        app.result(job_id, timeout=5)
    assert cancelled.value.errors[-1]["by"] == "ops"


def test_a_running_job_cancelled_while_a_caller_waits_raises_job_cancelled(app):
    job_id = app.enqueue("wait_for_cancel", {})
    outcome: list[BaseException] = []

    def waiter():
        try:
            app.result(job_id, timeout=30)
        except BaseException as exc:
            outcome.append(exc)

    with running(app, "q"):
        wait_until(lambda: app.job(job_id).state == "processing", 20, message="running")
        thread = threading.Thread(target=waiter)
        thread.start()
        app.cancel([job_id])
        thread.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], JobCancelled)


def test_a_job_that_does_not_finish_in_time_raises_result_timeout_a_timeout_error(app):
    job_id = app.enqueue("add", {"a": 1, "b": 1})  # no worker runs it
    with pytest.raises(ResultTimeout, match=f"job {job_id} did not finish within 0.2s"):
        app.result(job_id, timeout=0.2)
    with pytest.raises(TimeoutError):  # a TimeoutError too
        app.result(job_id, timeout=0)
    assert app.job(job_id).state == "pending"


def test_dispose_ends_the_results_listener_at_once(db_url):
    """A disposed pool's listener does not linger (or keep reconnecting to a database that is
    gone) for the idle time a listener otherwise waits for its next waiter."""
    pool = WorkerPool(db_url)
    pool.task(lambda job: None, name="t", queue="q")
    job_id = pool.enqueue("t", {})
    with pytest.raises(ResultTimeout):
        pool.result(job_id, timeout=0.3)  # starts the pool's listener
    listener = results._LISTENERS[pool]
    assert listener.is_alive()
    pool.dispose()
    listener.join(timeout=results.LISTENER_IDLE / 2)
    assert not listener.is_alive()


def test_an_unknown_or_pruned_job_raises_unknown_job(app, sql):
    with pytest.raises(UnknownJob, match="no job 987654"):
        app.result(987654, timeout=1)
    with pytest.raises(UnknownJob):
        app.job(987654)
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    testing.drain(app)
    sql("DELETE FROM workerpool_jobs WHERE id = %s", job_id)  # what pruning does
    with pytest.raises(UnknownJob, match="pruned"):
        app.result(job_id, timeout=1)


def test_an_unserialisable_result_fails_the_attempt_by_name_and_writes_nothing(app, sql):
    job_id = app.enqueue("unserialisable", {})
    with running(app, "q"):
        wait_until(lambda: app.job(job_id).finished, 20, message="job ended")
    row = job_row(sql, job_id)
    assert row["state"] == "dead" and app.job(job_id).result is None
    assert row["errors"][-1]["type"] == "PayloadError"
    assert row["errors"][-1]["message"] == "result $.when: object is not JSON-serialisable"


def test_a_result_over_the_size_limit_fails_the_attempt_by_name(app, sql):
    job_id = app.enqueue("huge", {})
    testing.drain(app)
    row = job_row(sql, job_id)
    assert row["state"] == "dead" and app.job(job_id).result is None
    assert row["errors"][-1]["type"] == "PayloadTooLarge"
    assert row["errors"][-1]["message"].startswith("result is ")


def test_drain_and_the_inline_mode_return_results(app):
    first = app.enqueue("add", {"a": 3, "b": 4})
    ran = testing.drain(app)
    assert [(r.job_id, r.result) for r in ran] == [(first, 7)]
    with app.testing_mode("inline"):
        job_id = app.enqueue("add_async", {"a": 1, "b": 1})
        assert app.result(job_id, timeout=0) == {"sum": 2, "items": [1, "two", None]}


# -- waking the waiters ---------------------------------------------------------------------------


def _complete_by_hand(pool: WorkerPool, sql, job_id: int, result: str) -> None:
    """Claim the job as a worker would and write its outcome through the worker's code."""
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
        " claimed_at = now() WHERE id = %s",
        job_id,
    )
    with pool.engine.begin() as conn:
        record_many(
            conn, "w", [(queries.Lease(job_id, 1, "w"), Outcome(OutcomeKind.DONE, result=result))]
        )


def _wait_in_thread(pool: WorkerPool, job_id: int) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(pool.result(job_id, timeout=60)))
    thread.start()
    return thread, got


def test_a_waiter_is_woken_by_the_notification_of_the_outcome(app, sql, monkeypatch):
    # polls 60 s apart: within the deadline below only the NOTIFY can wake the waiter
    monkeypatch.setattr(results, "POLL_FIRST", 60.0)
    monkeypatch.setattr(results, "POLL_CAP_LISTENING", 60.0)
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    thread, got = _wait_in_thread(app, job_id)
    wait_until(
        lambda: sql("SELECT count(*) FROM workerpool_waiters WHERE job_id = %s", job_id) == [(1,)],
        20,
        message="the waiter listed",
    )
    # and its listener connected (connecting wakes every waiter once: not the wake-up tested)
    wait_until(lambda: results._LISTENERS[app].connected.is_set(), 20, message="listening")
    _complete_by_hand(app, sql, job_id, "41")
    thread.join(20)
    assert got == [41]
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]  # forgotten by the outcome


def test_a_lost_notification_costs_latency_never_the_answer(app, sql, monkeypatch):
    monkeypatch.setattr(results_sql, "RESULTS_CHANNEL", "workerpool_nobody_listens")
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    thread, got = _wait_in_thread(app, job_id)
    wait_until(
        lambda: sql("SELECT count(*) FROM workerpool_waiters") == [(1,)],
        20,
        message="the waiter listed",
    )
    _complete_by_hand(app, sql, job_id, "5")
    thread.join(20)
    assert got == [5]


def test_without_listen_a_waiter_polls_and_lists_itself_nowhere(db_url, sql, monkeypatch):
    monkeypatch.setenv("WORKERPOOL_PGBOUNCER", "1")  # transaction pooling: no LISTEN
    pool = WorkerPool(db_url)
    pool.queue("q", poll_interval=0.05)
    pool.task(queue="q", name="add")(lambda job: job.payload["a"] + job.payload["b"])
    try:
        job_id = pool.enqueue("add", {"a": 1, "b": 2})
        thread, got = _wait_in_thread(pool, job_id)
        with running(pool, "q"):
            thread.join(30)
        assert got == [3]
        assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]
    finally:
        pool.dispose()


def test_a_waiter_that_gives_up_removes_its_row(app, sql):
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    with pytest.raises(ResultTimeout):
        app.result(job_id, timeout=0.3)
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]


# -- what the outcome path pays -------------------------------------------------------------------


def _statements(pool: WorkerPool, run) -> list[str]:
    seen: list[str] = []

    def count(conn, cursor, statement, *args):
        seen.append(" ".join(statement.split())[:60])

    event.listen(pool.engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(pool.engine, "before_cursor_execute", count)
    return seen


def _flush(pool: WorkerPool, sql, results_by_id: dict[int, str | None]) -> None:
    for job_id in results_by_id:
        sql(
            "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
            " claimed_at = now() WHERE id = %s",
            job_id,
        )
    with pool.engine.begin() as conn:
        record_many(
            conn,
            "w",
            [
                (queries.Lease(job_id, 1, "w"), Outcome(OutcomeKind.DONE, result=result))
                for job_id, result in results_by_id.items()
            ],
        )


def test_a_flush_of_plain_jobs_is_one_statement_with_or_without_results(app, sql):
    plain = [app.enqueue("add", {"a": i, "b": 0}) for i in range(3)]
    seen = _statements(
        app, lambda: _flush(app, sql, {plain[0]: None, plain[1]: "1", plain[2]: None})
    )
    assert len(seen) == 1 and seen[0].startswith("WITH done AS (UPDATE workerpool_jobs")
    assert [app.job(i).result for i in plain] == [None, 1, None]


def test_a_flush_that_ends_an_awaited_job_adds_one_notify(app, sql):
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    sql("INSERT INTO workerpool_waiters (job_id) VALUES (%s)", job_id)
    seen = _statements(app, lambda: _flush(app, sql, {job_id: "2"}))
    assert len(seen) == 2 and seen[1].startswith("WITH gone AS ( DELETE FROM workerpool_waiters")
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("job_id", ["1", True, 0, -3, 1.0, None])
def test_a_bad_job_id_is_refused_by_name(app, sql, job_id):
    for call in (
        lambda: app.result(job_id, timeout=0),
        lambda: app.job(job_id),
        lambda: asyncio.run(app.result_async(job_id, timeout=0)),
    ):
        with pytest.raises(InvalidJob, match="job id must be a positive int"):
            call()
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]


@pytest.mark.parametrize("timeout", ["1", True, -1, float("nan"), float("inf")])
def test_a_bad_timeout_is_refused_by_name_before_anything_is_read(app, sql, timeout):
    job_id = app.enqueue("add", {"a": 1, "b": 1})
    with pytest.raises(InvalidJob, match="timeout must be a finite number of seconds >= 0"):
        app.result(job_id, timeout=timeout)
    with pytest.raises(InvalidJob, match="timeout must be"):
        asyncio.run(app.result_async(job_id, timeout=timeout))
    assert sql("SELECT count(*) FROM workerpool_waiters") == [(0,)]
