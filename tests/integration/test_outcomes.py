"""Handlers driven in-process through claim → run → record: every outcome of DESIGN §4."""

from __future__ import annotations

import pytest

from workerpool import Backoff, Job, LeaseLost, Permanent, RetryLater, WorkerPool, testing
from workerpool.model.attempt import error_entry, safe_text


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")
    return pool


def row(sql, job_id):
    return sql(
        "SELECT state, dead_reason, attempts, errors, checkpoint FROM workerpool_jobs"
        " WHERE id = %s",
        job_id,
    )[0]


def test_return_means_done(app, sql):
    seen: list[Job] = []

    @app.task(queue="q")
    def ok(job):
        seen.append(job)

    job_id = app.enqueue("ok", {"x": 1}, key="k")
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert (seen[0].payload, seen[0].attempt, seen[0].key) == ({"x": 1}, 1, "k")
    assert sql("SELECT state, finished_at IS NOT NULL FROM workerpool_jobs") == [("done", True)]


def test_raise_retries_with_backoff_then_dead_exhausted(app, sql):
    @app.task(queue="q", max_attempts=2, backoff=Backoff(base=0, cap=0, jitter=0))
    def flaky(job):
        raise ConnectionError(f"provider 503 on attempt {job.attempt}")

    job_id = app.enqueue("flaky", {})
    assert testing.drain(app, "q") == [(job_id, "failed"), (job_id, "dead")]
    state, reason, attempts, errors, _ = row(sql, job_id)
    assert (state, reason, attempts) == ("dead", "exhausted", 2)
    assert [e["message"] for e in errors] == [
        "provider 503 on attempt 1",
        "provider 503 on attempt 2",
    ]
    assert errors[0]["type"] == "ConnectionError" and "Traceback" in errors[0]["traceback"]


def test_permanent_is_dead_at_once(app, sql):
    @app.task(queue="q", max_attempts=5)
    def invalid(job):
        raise Permanent("422: invalid address")

    job_id = app.enqueue("invalid", {})
    testing.drain(app, "q")
    state, reason, attempts, errors, _ = row(sql, job_id)
    assert (state, reason, attempts, errors[0]["message"]) == (
        "dead",
        "permanent",
        1,
        "422: invalid address",
    )


def test_retry_later_snoozes_without_spending_an_attempt(app, sql):
    @app.task(queue="q", max_attempts=1)
    def rate_limited(job):
        raise RetryLater(30)

    job_id = app.enqueue("rate_limited", {})
    assert testing.drain(app, "q") == [(job_id, "pending")]
    assert sql("SELECT state, attempts, run_at > now() + interval '25 s' FROM workerpool_jobs") == [
        ("pending", 0, True)
    ]


def test_checkpoint_survives_into_the_next_attempt(app, sql):
    steps: list = []

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def multi_step(job):
        steps.append(job.checkpoint_data)
        job.checkpoint({"done": ["sessions"]})
        if job.attempt == 1:
            raise TimeoutError("store 2 timed out")

    job_id = app.enqueue("multi_step", {})
    testing.drain(app, "q")
    assert steps == [None, {"done": ["sessions"]}]
    assert row(sql, job_id)[0] == "done"


def test_checkpoint_with_a_lost_lease_raises(app, sql):
    raised: list[BaseException] = []

    @app.task(queue="q")
    def slow(job):
        sql("UPDATE workerpool_jobs SET claimed_by = 'someone-else'")
        try:
            job.checkpoint({"step": 1})
        except LeaseLost as exc:
            raised.append(exc)

    job_id = app.enqueue("slow", {})
    assert testing.drain(app, "q") == [(job_id, None)]  # the completion is fenced out too
    assert len(raised) == 1
    assert sql("SELECT checkpoint, state FROM workerpool_jobs WHERE id = %s", job_id) == [
        (None, "processing")
    ]


def test_async_handlers_run(app, sql):
    @app.task(queue="q")
    async def async_task(job):
        return None

    job_id = app.enqueue("async_task", {})
    assert testing.drain(app, "q") == [(job_id, "done")]


def test_upcasters_turn_old_payloads_into_the_current_shape(app, db_url, sql):
    old = WorkerPool(db_url)
    old.task(queue="q", name="greet", version=1)(lambda job: None)
    old.enqueue("greet", {"name": "Ada"})
    old.dispose()
    seen = []

    @app.task(queue="q", version=2, upcasters={1: lambda p: {"first_name": p["name"]}})
    def greet(job):
        seen.append(job.payload)

    testing.drain(app, "q")
    assert seen == [{"first_name": "Ada"}]


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Unprintable(), "<unprintable Unprintable: str() raised RuntimeError>"),
        (ValueError("x" * 10_000), "x" * 2000 + "… [8000 more characters]"),
        (ValueError(b"\xff\xfe bytes"), "b'\\xff\\xfe bytes'"),
        (ValueError("nul\x00byte"), "nul\\x00byte"),
        (ValueError("\ud800 lone"), "? lone"),
    ],
)
def test_error_entries_are_always_storable(exc, expected, app, sql):
    assert error_entry(exc, attempt=1, worker="w")["message"] == expected

    @app.task(queue="q", max_attempts=1)
    def bad(job):
        raise exc

    job_id = app.enqueue("bad", {})
    testing.drain(app, "q")
    assert row(sql, job_id)[3][0]["message"] == expected


def test_safe_text_decodes_bytes():
    assert safe_text(b"caf\xc3\xa9 \xff", 100) == "café \ufffd"


@pytest.mark.parametrize("delay", [float("inf"), 1e18, -1])
def test_a_retry_later_delay_out_of_range_fails_the_attempt_by_name(app, sql, delay):
    @app.task(queue="q", name="odd_snooze", backoff=Backoff(base=0, cap=0))
    def odd_snooze(job):
        raise RetryLater(delay)

    job_id = app.enqueue("odd_snooze", {})
    assert testing.drain(app, "q")[0] == (job_id, "failed")
    [(errors,)] = sql("SELECT errors FROM workerpool_jobs WHERE id = %s", job_id)
    assert errors[0]["type"] == "InvalidJob" and "RetryLater delay" in errors[0]["message"]
