"""``job.wait_for_job`` against real PostgreSQL: a parent that awaits a child waits holding no
slot and spending no attempt, the child's final write (done, dead, cancelled) makes it due in
the same transaction, the handler runs again from the top with its steps replayed and gets the
child's result or its failure raised; a deadline is the maintenance sweep's; bad input is
refused by name."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import (
    InvalidJob,
    JobCancelled,
    JobFailed,
    Permanent,
    UnknownJob,
    WorkerPool,
    testing,
)
from workerpool.ops import why
from workerpool.runtime.maintenance.duties import Maintenance


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", poll_interval=0.05, concurrency=1)
    seen: list = []
    pool.seen = seen  # type: ignore[attr-defined]

    @pool.task(queue="q", max_attempts=1)
    def child(job):
        if job.payload.get("fail"):
            raise Permanent("the child gives up")
        return {"doubled": job.payload["n"] * 2}

    @pool.task(queue="elsewhere")
    def never_run(job):  # a child no test drains
        return None

    @pool.task(queue="q", max_attempts=2)
    def parent(job):
        task = job.payload.get("task", "child")
        spawned = job.step("spawn", lambda: pool.enqueue(task, job.payload["child"]))
        seen.append(("run", job.id))
        try:
            got = job.wait_for_job(spawned, timeout=job.payload.get("timeout"))
        except (JobFailed, JobCancelled, TimeoutError) as exc:
            seen.append(("raised", type(exc).__name__))
            return {"raised": type(exc).__name__}
        seen.append(("got", got))
        return {"child": spawned, "got": got}

    @pool.task(queue="q")
    def awaits_given(job):
        return job.wait_for_job(job.payload["id"])

    return pool


def sweeper(app: WorkerPool) -> Maintenance:
    return Maintenance(app.registry, app.engine, worker_id="m")


def state(sql, job_id: int) -> tuple:
    return sql("SELECT state, attempts FROM workerpool_jobs WHERE id = %s", job_id)[0]


def test_a_parent_waits_for_its_child_then_gets_its_result(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 21}})
    assert testing.drain(app, "q", max_jobs=1) == [(parent, "waiting")]
    child = sql("SELECT id FROM workerpool_jobs WHERE task = 'child'")[0][0]
    assert state(sql, parent) == ("waiting", 0)  # no attempt spent
    assert sql("SELECT job_id, parent_id, kind, if_failed FROM workerpool_job_dependencies") == [
        (parent, child, "await", "run")
    ]
    assert testing.drain(app, "q") == [(child, "done"), (parent, "done")]
    assert sql("SELECT result, attempts FROM workerpool_jobs WHERE id = %s", parent) == [
        ({"child": child, "got": {"doubled": 42}}, 1)
    ]
    # the replay did not enqueue a second child: the spawn is a step
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE task = 'child'") == [(1,)]
    step = sql("SELECT steps->%s FROM workerpool_jobs WHERE id = %s", f"await:{child}", parent)
    assert step[0][0]["kind"] == "await" and step[0][0]["value"]["result"] == {"doubled": 42}


def test_the_childs_final_write_makes_the_parent_due_in_its_transaction(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 1}})
    testing.drain(app, "q", max_jobs=1)
    child = sql("SELECT id FROM workerpool_jobs WHERE task = 'child'")[0][0]
    assert testing.drain(app, "q", max_jobs=1) == [(child, "done")]
    # no sweep ran: the child's completing transaction released the parent
    assert sql("SELECT state, run_at <= now() FROM workerpool_jobs WHERE id = %s", parent) == [
        ("pending", True)
    ]


def test_a_child_already_ended_returns_at_once(app, sql):
    child = app.enqueue("child", {"n": 4})
    testing.drain(app, "q")
    waiter = app.enqueue("awaits_given", {"id": child})
    assert testing.drain(app, "q") == [(waiter, "done")]
    assert app.result(waiter) == {"doubled": 8}
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]


def test_a_child_that_dies_raises_job_failed_in_the_parent(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 1, "fail": True}})
    testing.drain(app, "q")
    assert app.result(parent) == {"raised": "JobFailed"}
    child = sql("SELECT id, state FROM workerpool_jobs WHERE task = 'child'")[0]
    assert child[1] == "dead"


def test_a_cancelled_child_raises_job_cancelled_in_the_parent(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 1}})
    testing.drain(app, "q", max_jobs=1)
    child = sql("SELECT id FROM workerpool_jobs WHERE task = 'child'")[0][0]
    app.cancel([child])
    assert state(sql, parent)[0] == "pending"
    assert testing.drain(app, "q") == [(parent, "done")]
    assert app.result(parent) == {"raised": "JobCancelled"}


def test_a_timeout_raises_once_the_sweep_makes_the_parent_due(app, sql):
    parent = app.enqueue("parent", {"child": {}, "task": "never_run", "timeout": 0.3})
    testing.drain(app, "q", max_jobs=1)
    # a fresh maintenance child each time: one sweeps at most every few seconds
    wait_until(
        lambda: sweeper(app).sweep_awaits() or state(sql, parent)[0] == "pending",
        10,
        message="the deadline passed and the sweep made the parent due",
    )
    # the edge to the child it gave up on is gone: a later await is not held by it
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]
    assert testing.drain(app, "q") == [(parent, "done")]
    assert app.result(parent) == {"raised": "TimeoutError"}
    step = sql("SELECT steps->'await:2'->'timed_out' FROM workerpool_jobs WHERE id = %s", parent)
    assert step == [(True,)]


def test_the_sweep_leaves_a_parent_before_its_deadline(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 1}, "timeout": 600})
    testing.drain(app, "q", max_jobs=1)
    assert sweeper(app).sweep_awaits() == {}
    assert state(sql, parent)[0] == "waiting"


def test_one_slot_runs_the_parent_and_its_child_without_deadlock(app, sql):
    """concurrency=1: a parent blocking on pool.result would hold the only slot forever."""
    parent = app.enqueue("parent", {"child": {"n": 5}})
    with running(app, "q"):
        wait_until(lambda: state(sql, parent)[0] == "done", 20, message="the parent done")
    assert app.result(parent)["got"] == {"doubled": 10}
    assert [kind for kind, _ in app.seen] == ["run", "run", "got"]


def test_why_names_the_child_a_parent_awaits(app, sql):
    parent = app.enqueue("parent", {"child": {"n": 1}})
    testing.drain(app, "q", max_jobs=1)
    child = sql("SELECT id FROM workerpool_jobs WHERE task = 'child'")[0][0]
    with app.engine.connect() as conn:
        explained = why.explain(conn, parent)
    assert explained.reasons[0].code == "awaits"
    assert f"job {child} (child, pending)" in explained.reasons[0].text


@pytest.mark.parametrize(
    ("given", "error"),
    [("7", InvalidJob), (0, InvalidJob), (True, InvalidJob), (10**12, UnknownJob)],
)
def test_bad_input_is_refused_by_name_in_the_handler(app, sql, given, error):
    waiter = app.enqueue("awaits_given", {"id": given})
    assert testing.drain(app, "q") == [(waiter, "failed")]
    entry = sql("SELECT errors->-1 FROM workerpool_jobs WHERE id = %s", waiter)[0][0]
    assert entry["type"] == error.__name__
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]


def test_a_job_cannot_await_itself(app, sql):
    job_id = app.enqueue("awaits_given", {"id": 1})
    assert job_id == 1
    testing.drain(app, "q")
    entry = sql("SELECT errors->-1 FROM workerpool_jobs WHERE id = %s", job_id)[0][0]
    assert (entry["type"], entry["message"]) == ("InvalidJob", "job 1 cannot await itself")


def test_inline_testing_mode_runs_the_child_and_then_the_parent(app, sql):
    """Inline mode runs each job after the transaction that enqueued it: the parent spawns its
    child, waits, the child runs and releases it, and the parent finishes, all in the call."""
    with app.testing_mode("inline"):
        parent = app.enqueue("parent", {"child": {"n": 3}})
    assert app.result(parent, timeout=0)["got"] == {"doubled": 6}
    assert sql("SELECT task, state FROM workerpool_jobs ORDER BY id") == [
        ("parent", "done"),
        ("child", "done"),
    ]


def test_a_child_locked_elsewhere_makes_the_parent_look_again_without_waiting(app, sql, dsn):
    """The outcome flush never waits on the awaited row (two flushes completing each other's
    awaited jobs would deadlock): a locked child makes the parent due again shortly."""
    child = app.enqueue("never_run", {})
    waiter = app.enqueue("awaits_given", {"id": child})
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1 FROM workerpool_jobs WHERE id = %s FOR UPDATE", (child,))
        assert testing.drain(app, "q") == [(waiter, "pending")]
    assert sql("SELECT state, run_at > now() FROM workerpool_jobs WHERE id = %s", waiter) == [
        ("pending", True)
    ]
    assert sql("SELECT count(*) FROM workerpool_job_dependencies") == [(0,)]
