"""Durable steps against real PostgreSQL: ``job.step`` runs once and replays its stored value,
``job.sleep`` snoozes without an attempt or a slot, and every bad input is refused by name.

A killed ``workerpool run`` child resuming at step 3 of 4 is in
tests/processes/test_steps_processes.py.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import Backoff, LeaseLost, PayloadError, PayloadTooLarge, WorkerPool, testing
from workerpool.model.errors import InvalidStep


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")
    return pool


def steps_of(sql, job_id: int) -> dict:
    return sql("SELECT steps FROM workerpool_jobs WHERE id = %s", job_id)[0][0]


def errors_of(sql, job_id: int) -> list[dict]:
    return sql("SELECT errors FROM workerpool_jobs WHERE id = %s", job_id)[0][0]


# -- step ----------------------------------------------------------------------------------------


def test_a_step_runs_once_and_a_retry_gets_its_stored_value(app, sql):
    calls: list[str] = []
    seen: list = []

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def charge(job):
        invoice = job.step("invoice", lambda: calls.append("invoice") or {"id": "inv_1"})
        seen.append(invoice)
        if job.attempt == 1:
            raise ConnectionError("CRM sync failed")
        return job.step("receipt", lambda: calls.append("receipt") or ["sent", 1])

    job_id = app.enqueue("charge", {})
    assert testing.drain(app, "q", retries="now") == [(job_id, "failed"), (job_id, "done")]
    assert calls == ["invoice", "receipt"]
    assert seen == [{"id": "inv_1"}, {"id": "inv_1"}]
    steps = steps_of(sql, job_id)
    assert set(steps) == {"invoice", "receipt"}
    assert steps["invoice"]["value"] == {"id": "inv_1"}
    assert steps["receipt"]["value"] == ["sent", 1]
    assert (steps["invoice"]["kind"], steps["invoice"]["attempt"]) == ("step", 1)
    assert steps["receipt"]["attempt"] == 2
    assert sql("SELECT result FROM workerpool_jobs")[0][0] == ["sent", 1]
    for entry in steps.values():
        assert entry["started_at"] <= entry["finished_at"]


def test_a_step_that_raises_is_not_recorded_and_runs_again(app, sql):
    calls: list[int] = []

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def flaky(job):
        def call():
            calls.append(job.attempt)
            if job.attempt == 1:
                raise ConnectionError("provider 503")
            return "ok"

        return job.step("call", call)

    job_id = app.enqueue("flaky", {})
    assert testing.drain(app, "q", retries="now") == [(job_id, "failed"), (job_id, "done")]
    assert calls == [1, 2]
    assert steps_of(sql, job_id)["call"]["value"] == "ok"


def test_a_step_name_used_twice_in_one_run_is_refused(app, sql):
    @app.task(queue="q", max_attempts=1)
    def twice(job):
        job.step("a", lambda: 1)
        job.step("a", lambda: 2)

    job_id = app.enqueue("twice", {})
    assert testing.drain(app, "q") == [(job_id, "dead")]
    assert errors_of(sql, job_id)[0]["type"] == "StepNameReused"
    assert steps_of(sql, job_id)["a"]["value"] == 1


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({1, 2}, PayloadError),
        ((1, 2), PayloadError),
        (float("nan"), PayloadError),
        ("x" * (70 * 1024), PayloadTooLarge),
    ],
)
def test_a_step_result_that_is_not_json_is_refused_and_nothing_recorded(app, sql, value, error):
    raised: list[BaseException] = []

    @app.task(queue="q", max_attempts=1)
    def bad(job):
        try:
            job.step("bad", lambda: value)
        except PayloadError as exc:
            raised.append(exc)
            raise

    job_id = app.enqueue("bad", {})
    testing.drain(app, "q")
    assert type(raised[0]) is error and "step 'bad'" in str(raised[0])
    assert steps_of(sql, job_id) is None


@pytest.mark.parametrize("name", ["", "  ", None, 7, "x" * 201, "a\x00b"])
def test_a_bad_step_name_is_refused(app, sql, name):
    calls: list[int] = []

    @app.task(queue="q", max_attempts=1)
    def bad(job):
        job.step(name, lambda: calls.append(1))

    job_id = app.enqueue("bad", {})
    testing.drain(app, "q")
    assert errors_of(sql, job_id)[0]["type"] == "InvalidStep"
    assert calls == [] and steps_of(sql, job_id) is None
    assert issubclass(InvalidStep, ValueError)


def test_a_stale_owner_cannot_record_a_step(app, sql):
    """The job's lease runs out (its worker renews nothing) and the stale recovery gives the
    row to another worker; the first handler's step is then refused and nothing of it is
    stored (the row's steps are the new owner's)."""
    app.queue("slow", poll_interval=0.05, stale_after=1.0, concurrency=2)
    first_run, resume = threading.Event(), threading.Event()
    raised: list[BaseException] = []
    runs: list[int] = []

    @app.task(queue="slow", backoff=Backoff(base=0, cap=0))
    def slow(job):
        runs.append(job.attempt)
        if len(runs) == 1:
            first_run.set()
            resume.wait(30)
            try:
                job.step("late", lambda: "from the stale owner")
            except LeaseLost as exc:
                raised.append(exc)
                raise
        return "second run"

    job_id = app.enqueue("slow", {})
    with running(app, "slow", renew_leases=False):
        assert first_run.wait(10)
        with running(app, "slow"):  # the new owner: it holds nothing, so it takes the suspect
            wait_until(
                lambda: len(runs) >= 2, 30, message="the job reclaimed after its lease ran out"
            )
            wait_until(lambda: sql("SELECT state FROM workerpool_jobs")[0][0] == "done", 10)
        resume.set()
        wait_until(lambda: raised, 10, message="the stale owner's step refused")
    assert "lease lost" in str(raised[0])
    assert steps_of(sql, job_id) is None
    assert sql("SELECT result FROM workerpool_jobs") == [("second run",)]


def test_step_async_runs_once_in_an_async_handler(app, sql):
    calls: list[int] = []

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    async def fetch(job):
        async def call():
            await asyncio.sleep(0)
            calls.append(job.attempt)
            return {"rows": 3}

        rows = await job.step_async("fetch", call)
        if job.attempt == 1:
            raise ConnectionError("later")
        return rows

    job_id = app.enqueue("fetch", {})
    assert testing.drain(app, "q", retries="now") == [(job_id, "failed"), (job_id, "done")]
    assert calls == [1]
    assert sql("SELECT result FROM workerpool_jobs")[0][0] == {"rows": 3}


def test_step_async_in_a_worker_records_off_the_event_loop(app, sql):
    app.queue("a", poll_interval=0.05)
    calls: list[int] = []

    @app.task(queue="a", backoff=Backoff(base=0, cap=0))
    async def fetch(job):
        async def call():
            calls.append(job.attempt)
            return job.attempt

        first = await job.step_async("first", call)
        if job.attempt == 1:
            raise ConnectionError("later")
        return first

    job_id = app.enqueue("fetch", {})
    with running(app, "a"):
        wait_until(lambda: sql("SELECT state FROM workerpool_jobs")[0][0] == "done", 20)
    assert calls == [1]
    assert sql("SELECT attempts FROM workerpool_jobs") == [(2,)]
    assert steps_of(sql, job_id)["first"]["value"] == 1


# -- sleep ---------------------------------------------------------------------------------------


def test_a_sleep_snoozes_without_an_attempt_and_is_a_finished_step_after(app, sql):
    seen: list[str] = []

    @app.task(queue="q", max_attempts=1)
    def nap(job):
        seen.append(job.step("before", lambda: "b"))
        job.sleep("cool_off", 3600)
        seen.append("after")
        return "woke"

    job_id = app.enqueue("nap", {})
    assert testing.drain(app, "q") == [(job_id, "pending")]
    assert sql(
        "SELECT state, attempts, run_at > now() + interval '3500 s',"
        " run_at < now() + interval '3700 s' FROM workerpool_jobs"
    ) == [("pending", 0, True, True)]
    steps = steps_of(sql, job_id)
    assert steps["cool_off"]["kind"] == "sleep"
    assert sql(
        "SELECT (steps->'cool_off'->>'finished_at')::timestamptz = run_at FROM workerpool_jobs"
    ) == [(True,)]
    sql("UPDATE workerpool_jobs SET run_at = now()")  # the hour has passed
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert seen == ["b", "b", "after"]
    assert sql("SELECT attempts, errors FROM workerpool_jobs") == [(1, [])]


@pytest.mark.parametrize("seconds", [-1, float("inf"), float("nan"), "60", True, 1e12])
def test_a_bad_sleep_is_refused(app, sql, seconds):
    @app.task(queue="q", max_attempts=1)
    def nap(job):
        job.sleep("nap", seconds)

    job_id = app.enqueue("nap", {})
    assert testing.drain(app, "q") == [(job_id, "dead")]
    assert errors_of(sql, job_id)[0]["type"] == "InvalidStep"
    assert steps_of(sql, job_id) is None


def test_a_sleeping_job_holds_no_slot(app, sql):
    """concurrency=1: while one job sleeps, the queue runs the others."""
    app.queue("one", concurrency=1, prefetch=0, poll_interval=0.05)
    order: list[str] = []

    @app.task(queue="one")
    def sleeper(job):
        order.append("sleeper")
        job.sleep("wait", 2)
        order.append("sleeper woke")

    @app.task(queue="one")
    def other(job):
        order.append(f"other {job.payload['n']}")

    sleeper_id = app.enqueue("sleeper", {})
    with running(app, "one"):
        wait_until(
            lambda: (
                sql("SELECT state FROM workerpool_jobs WHERE id = %s", sleeper_id)[0][0]
                == "pending"
                and order
            ),
            10,
            message="the sleeper asleep",
        )
        app.enqueue_many([("other", {"n": n}) for n in range(3)])
        wait_until(
            lambda: (
                sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done' AND task = 'other'")[
                    0
                ][0]
                == 3
            ),
            10,
            message="the other jobs ran while it slept",
        )
        assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", sleeper_id)[0][0] == "pending"
        wait_until(
            lambda: (
                sql("SELECT state FROM workerpool_jobs WHERE id = %s", sleeper_id)[0][0] == "done"
            ),
            20,
            message="the sleeper woke",
        )
    assert order[:4] == ["sleeper", "other 0", "other 1", "other 2"]
    assert order[-2:] == ["sleeper", "sleeper woke"]
    assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", sleeper_id) == [(1,)]


def test_an_async_handler_sleeps_and_waits_like_a_sync_one(app, sql):
    seen: list = []

    @app.task(queue="q", max_attempts=1)
    async def flow(job):
        await job.step_async("first", _one)
        job.sleep("nap", 3600)
        seen.append(job.wait_for("go", timeout=600))
        return "done"

    job_id = app.enqueue("flow", {})
    assert testing.drain(app, "q") == [(job_id, "pending")]  # asleep
    sql("UPDATE workerpool_jobs SET run_at = now()")
    assert testing.drain(app, "q") == [(job_id, "waiting")]
    app.signal("go", 1)
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert seen == [1]
    assert sql("SELECT attempts FROM workerpool_jobs") == [(1,)]


async def _one() -> int:
    return 1
