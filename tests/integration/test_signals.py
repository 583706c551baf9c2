"""Signals against real PostgreSQL: ``job.wait_for`` and ``pool.signal``. A signal sent before
or after the wait wakes the job, the first signal of a name stands, a timeout raises in the
handler, a missed wake-up is found by the maintenance sweep, and bad input writes nothing."""

from __future__ import annotations

import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import (
    InvalidSignal,
    PayloadError,
    SignalExists,
    WorkerPool,
    testing,
)
from workerpool import sql as queries
from workerpool.model.job import Lease
from workerpool.runtime.maintenance.duties import Maintenance
from workerpool.sql import signals


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", poll_interval=0.05)
    seen: list = []
    pool.seen = seen  # type: ignore[attr-defined]

    @pool.task(queue="q", max_attempts=2)
    def approval(job):
        try:
            approved = job.wait_for(
                f"approved:{job.payload['order']}", timeout=job.payload.get("timeout", 600)
            )
        except TimeoutError as exc:
            seen.append(("timeout", str(exc)))
            return "timed out"
        seen.append(("approved", approved))
        return {"approved": approved}

    return pool


def row(sql, job_id: int) -> tuple:
    return sql(
        "SELECT state, attempts, signal, claimed_by FROM workerpool_jobs WHERE id = %s", job_id
    )[0]


def test_a_signal_sent_before_the_wait_is_kept_and_returned(app, sql):
    app.signal("approved:7", {"by": "ada"})
    job_id = app.enqueue("approval", {"order": 7})
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert app.seen == [("approved", {"by": "ada"})]
    step = sql("SELECT steps->'approved:7' FROM workerpool_jobs")[0][0]
    assert (step["kind"], step["value"]) == ("wait", {"by": "ada"})


def test_a_signal_sent_after_the_wait_wakes_the_job(app, sql):
    job_id = app.enqueue("approval", {"order": 8})
    assert testing.drain(app, "q") == [(job_id, "waiting")]
    state, attempts, signal, _ = row(sql, job_id)
    assert (state, attempts, signal) == ("waiting", 0, "approved:8")  # no attempt spent
    assert testing.drain(app, "q") == []  # not claimable
    sent_at = app.signal("approved:8", {"by": "grace"})
    assert sent_at is not None
    assert sql("SELECT state, signal, run_at <= now() FROM workerpool_jobs") == [
        ("pending", None, True)
    ]
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert app.seen == [("approved", {"by": "grace"})]
    assert sql("SELECT attempts, result FROM workerpool_jobs") == [
        (1, {"approved": {"by": "grace"}})
    ]
    step = sql("SELECT steps->'approved:8' FROM workerpool_jobs")[0][0]
    assert step["started_at"] < step["finished_at"] and step["value"] == {"by": "grace"}


def test_a_running_worker_is_woken_by_the_signal(app, sql):
    """The waiting job holds no slot; the signal's NOTIFY brings it back within the poll."""
    job_id = app.enqueue("approval", {"order": 9})
    with running(app, "q"):
        wait_until(lambda: row(sql, job_id)[0] == "waiting", 10, message="the job waiting")
        app.signal("approved:9", "yes")
        wait_until(lambda: row(sql, job_id)[0] == "done", 10, message="the job woken and done")
    assert app.seen == [("approved", "yes")]


def test_the_first_signal_of_a_name_stands(app, sql):
    app.signal("approved:1", {"n": 1})
    with pytest.raises(SignalExists) as refused:
        app.signal("approved:1", {"n": 2})
    assert refused.value.payload == {"n": 1} and refused.value.sent_at is not None
    assert sql("SELECT name, payload FROM workerpool_signals") == [("approved:1", {"n": 1})]


def test_a_signal_in_the_callers_transaction_exists_iff_it_commits(app, sql):
    job_id = app.enqueue("approval", {"order": 3})
    testing.drain(app, "q")
    with app.engine.connect() as conn:
        with conn.begin() as tx:
            app.signal("approved:3", 1, conn=conn)
            tx.rollback()
    assert sql("SELECT count(*) FROM workerpool_signals") == [(0,)]
    assert row(sql, job_id)[0] == "waiting"
    with app.engine.begin() as conn:
        app.signal("approved:3", 1, conn=conn)
    assert row(sql, job_id)[0] == "pending"


def test_a_timeout_raises_in_the_handler_once_the_sweep_makes_the_job_due(app, sql):
    job_id = app.enqueue("approval", {"order": 4, "timeout": 0.5})
    assert testing.drain(app, "q") == [(job_id, "waiting")]
    assert sql("SELECT run_at > now() FROM workerpool_jobs") == [(True,)]
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    wait_until(
        lambda: maintenance.sweep_signals() or row(sql, job_id)[0] == "pending",
        10,
        message="the deadline passed and the sweep made the job due",
    )
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert app.seen == [("timeout", "wait for signal 'approved:4' timed out")]
    step = sql("SELECT steps->'approved:4' FROM workerpool_jobs")[0][0]
    assert step["timed_out"] is True
    app.signal("approved:4", "too late")  # kept, but the job has moved on
    assert sql("SELECT result FROM workerpool_jobs") == [("timed out",)]


def test_a_missed_wake_up_is_found_by_the_sweep(app, sql):
    job_id = app.enqueue("approval", {"order": 5})
    testing.drain(app, "q")
    # the signal's row without its wake-up (as if the wake had been lost)
    sql("INSERT INTO workerpool_signals (name, payload) VALUES ('approved:5', '\"late\"')")
    assert row(sql, job_id)[0] == "waiting"
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    assert maintenance.sweep_signals() == {"q": 1}
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert app.seen == [("approved", "late")]


def test_a_signal_sent_while_the_wait_is_being_written_is_seen(app, sql):
    """The wait's write runs under the signal's lock: a signal committed before it makes the
    job due at once instead of waiting for a signal that already came."""
    job_id = app.enqueue("approval", {"order": 6})
    with app.engine.begin() as conn:
        claimed = queries.claim(
            conn,
            queue="q",
            worker="w1",
            limit=1,
            task_versions={"approval": 1},
        )
    assert [r.id for r in claimed] == [job_id]
    app.signal("approved:6", "meanwhile")
    with app.engine.begin() as conn:
        state = signals.wait(conn, Lease(job_id, 1, "w1"), "approved:6", 600)
    assert state == "pending"
    assert row(sql, job_id)[:3] == ("pending", 0, None)


@pytest.mark.parametrize("name", ["", " ", None, 3, "x" * 201, "a\x00", "a\ud800"])
def test_a_bad_signal_name_is_refused_before_anything_is_written(app, sql, name):
    with pytest.raises(InvalidSignal):
        app.signal(name, {})
    assert sql("SELECT count(*) FROM workerpool_signals") == [(0,)]


@pytest.mark.parametrize("payload", [{1, 2}, float("nan"), {"a": "\x00"}, "x" * 70_000])
def test_a_bad_signal_payload_is_refused_before_anything_is_written(app, sql, payload):
    with pytest.raises(PayloadError):
        app.signal("approved:1", payload)
    assert sql("SELECT count(*) FROM workerpool_signals") == [(0,)]


@pytest.mark.parametrize("timeout", [-1, float("inf"), "10", True])
def test_a_bad_wait_timeout_is_refused(pool, sql, timeout):
    pool.queue("q")

    @pool.task(queue="q", max_attempts=1)
    def bad(job):
        job.wait_for("x", timeout=timeout)

    job_id = pool.enqueue("bad", {})
    assert testing.drain(pool, "q") == [(job_id, "dead")]
    assert sql("SELECT errors->0->>'type', steps FROM workerpool_jobs") == [("InvalidStep", None)]
