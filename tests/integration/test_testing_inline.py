"""Inline mode is one seam: every path that writes jobs or makes them due runs them.

``pool.testing_mode("inline")`` is chosen once; each path below hands its ids to the same
seam, and each test checks that the jobs it wrote (or released) ended ``done`` in this process.
"""

from __future__ import annotations

import asyncio

import pytest

from workerpool import WorkerPool, testing


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.seen = []

    @pool.task(queue="email")
    def send(job):
        pool.seen.append(("send", job.payload.get("n")))
        return job.payload.get("n")

    @pool.task(queue="chores")
    def tidy(job):
        pool.seen.append(("tidy", job.payload.get("n")))

    @pool.task(queue="chores")
    def report(job):
        pool.seen.append(("report", None))

    @pool.task(queue="chores")
    def waits(job):
        pool.seen.append(("waits", job.wait_for("go")))

    @pool.task(queue="chores")
    def naps(job):
        job.sleep("nap", 0)
        pool.seen.append(("naps", job.step("after", lambda: "woke")))

    return pool


def states(sql, *ids: int) -> list[str]:
    rows = dict(sql("SELECT id, state FROM workerpool_jobs WHERE id = ANY(%s)", list(ids)))
    return [rows[i] for i in ids]


def test_a_single_enqueue_runs(app, sql):
    with app.testing_mode("inline"):
        job_id = app.enqueue("send", {"n": 1})
    assert states(sql, job_id) == ["done"]
    assert app.seen == [("send", 1)]


def test_many_enqueued_together_run(app, sql):
    with app.testing_mode("inline"):
        ids = app.enqueue_many([("send", {"n": 1}), ("tidy", {"n": 2})])
    assert states(sql, *ids) == ["done", "done"]


def test_the_async_enqueues_run(app, sql):
    async def main() -> list[int]:
        one = await app.enqueue_async("send", {"n": 1})
        return [one, *await app.enqueue_many_async([("tidy", {"n": 2})])]

    with app.testing_mode("inline"):
        ids = asyncio.run(main())
    assert states(sql, *ids) == ["done", "done"]


def test_a_batch_runs_its_members_and_then_its_callback(app, sql):
    with app.testing_mode("inline"):
        with app.batch(on_complete="report") as batch:
            members = [batch.enqueue("send", {"n": n}) for n in (1, 2)]
    assert states(sql, *members) == ["done", "done"]
    assert app.seen[-1] == ("report", None)
    assert app.batch_status(batch.id).finished


def test_a_chain_runs_in_order_across_queues(app, sql):
    with app.testing_mode("inline"):
        ids = app.chain([("send", {"n": 1}), ("tidy", {"n": 2}), ("send", {"n": 3})])
    assert states(sql, *ids) == ["done", "done", "done"]
    assert app.seen == [("send", 1), ("tidy", 2), ("send", 3)]


def test_a_workflow_runs_every_step(app, sql):
    with app.testing_mode("inline"):
        wf = app.workflow()
        wf.step("first", "send", {"n": 1})
        wf.step("second", "tidy", {"n": 2}, after=["first"])
        wf.step("third", "send", {"n": 3}, after=["first"])
        ids = wf.run()
    assert states(sql, *ids.values()) == ["done", "done", "done"]
    assert app.seen[0] == ("send", 1)


def test_a_dependent_released_by_its_parent_runs_in_its_own_queue(app, sql):
    parent = app.enqueue("send", {"n": 1})  # written before the mode: waiting for a worker
    child = app.enqueue("tidy", {"n": 2}, after=[parent])
    with app.testing_mode("inline"):
        app.enqueue("send", {"n": 3})  # drains the email queue: the parent runs, the child's
    assert states(sql, parent, child) == ["done", "done"]  # queue is drained only once released
    assert app.seen == [("send", 1), ("send", 3), ("tidy", 2)]


def test_a_job_released_by_a_signal_runs(app, sql):
    with app.testing_mode("inline"):
        job_id = app.enqueue("waits", {})
        assert states(sql, job_id) == ["waiting"]
        app.signal("go", {"ready": True})
    assert states(sql, job_id) == ["done"]
    assert app.seen == [("waits", {"ready": True})]


def test_a_job_released_by_its_own_sleep_step_runs_on(app, sql):
    with app.testing_mode("inline"):
        job_id = app.enqueue("naps", {})
    assert states(sql, job_id) == ["done"]
    assert app.seen == [("naps", "woke")]


def test_outside_inline_mode_every_path_leaves_its_jobs_to_a_worker(app, sql):
    wf = app.workflow()
    wf.step("first", "send", {"n": 1})
    ids = [app.enqueue("send", {}), *app.chain([("tidy", {})]), *wf.run().values()]
    assert set(states(sql, *ids)) == {"pending"}
    assert app.seen == []
    assert len(testing.enqueued(app)) == 3
