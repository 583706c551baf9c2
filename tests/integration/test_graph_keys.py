"""A key for a whole chain or workflow: the same call twice makes one graph, a finished one is
never reopened, and key options on a later step are refused by name with nothing written."""

from __future__ import annotations

import threading

import pytest

from workerpool import IdempotencyConflict, WorkerPool, testing
from workerpool.model.errors import DuplicateJob, InvalidDependency


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("shop")

    @pool.task(queue="shop")
    def charge(job):
        return {"charged": job.payload["order"]}

    @pool.task(queue="shop")
    def receipt(job):
        return "sent"

    return pool


def counts(sql) -> dict[str, int]:
    rows = sql(
        "SELECT task, count(*) FROM workerpool_jobs GROUP BY task"
        " UNION ALL SELECT task, count(*) FROM workerpool_jobs_history GROUP BY task"
    )
    total: dict[str, int] = {}
    for task, n in rows:
        total[task] = total.get(task, 0) + n
    return total


def charge_then_receipt(app: WorkerPool, **options) -> list[int]:
    return app.chain(
        [("charge", {"order": 42}, {"key": "order-42"}), ("receipt", {"order": 42})], **options
    )


def test_the_same_keyed_chain_twice_is_one_chain(app, sql):
    first = charge_then_receipt(app)
    again = charge_then_receipt(app)
    assert again == first
    assert counts(sql) == {"charge": 1, "receipt": 1}  # no second receipt behind the charge


def test_a_keyed_chain_run_again_after_it_finished_reopens_nothing(app, sql):
    first = charge_then_receipt(app)
    ran = testing.drain(app)
    assert [r.state for r in ran] == ["done", "done"]
    attempts = sql(
        "SELECT id, state, attempts FROM workerpool_jobs WHERE id = ANY(%s)"
        " UNION ALL SELECT id, state, attempts FROM workerpool_jobs_history"
        " WHERE id = ANY(%s) ORDER BY id",
        first,
        first,
    )
    assert charge_then_receipt(app) == first
    assert (
        sql(
            "SELECT id, state, attempts FROM workerpool_jobs WHERE id = ANY(%s)"
            " UNION ALL SELECT id, state, attempts FROM workerpool_jobs_history"
            " WHERE id = ANY(%s) ORDER BY id",
            first,
            first,
        )
        == attempts
    )
    assert [state for _, state, _ in attempts] == ["done", "done"]
    assert testing.drain(app) == []  # nothing due again: the done charge was not reopened


def test_a_chain_key_argument_names_the_chain(app, sql):
    steps = [("charge", {"order": 7}), ("receipt", {"order": 7})]
    first = app.chain(steps, key="order-7")
    assert app.chain(steps, key="order-7") == first
    assert sql("SELECT key FROM workerpool_jobs WHERE id = %s", first[0]) == [("order-7",)]


def test_the_key_is_checked_as_enqueue_checks_it(app, sql):
    charge_then_receipt(app)
    with pytest.raises(IdempotencyConflict, match="different payload"):
        app.chain([("charge", {"order": 43}, {"key": "order-42"}), ("receipt", {})])
    with pytest.raises(DuplicateJob):
        app.chain(
            [
                ("charge", {"order": 42}, {"key": "order-42", "on_conflict": "error"}),
                ("receipt", {"order": 42}),
            ]
        )
    app.enqueue("charge", {"order": 9}, key="lonely")
    with pytest.raises(IdempotencyConflict, match="heads no chain"):
        app.chain([("charge", {"order": 9}, {"key": "lonely"}), ("receipt", {})])
    assert counts(sql) == {"charge": 2, "receipt": 1}


def test_keys_on_a_later_step_are_refused_with_nothing_written(app, sql):
    for option in ({"key": "r"}, {"unique": "live", "key": "r"}):
        with pytest.raises(InvalidDependency, match=r"step 1: .* later step of a chain"):
            app.chain([("charge", {"order": 1}), ("receipt", {}, option)])
    with pytest.raises(InvalidDependency, match="give one"):
        app.chain([("charge", {"order": 1}, {"key": "a"}), ("receipt", {})], key="b")
    with pytest.raises(InvalidDependency, match="replace"):
        app.chain(
            [("charge", {"order": 1}, {"key": "a", "on_conflict": "replace"}), ("receipt", {})]
        )
    assert counts(sql) == {}


def test_two_callers_at_once_make_one_chain(app, sql):
    results: list[list[int]] = []
    barrier = threading.Barrier(4)

    def call() -> None:
        barrier.wait()
        results.append(charge_then_receipt(app))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert counts(sql) == {"charge": 1, "receipt": 1}


def test_a_keyed_workflow_twice_is_one_workflow(app, sql):
    def build() -> dict[str, int]:
        wf = app.workflow(key="order-5")
        wf.step("charge", "charge", {"order": 5})
        wf.step("receipt", "receipt", {"order": 5}, after=["charge"])
        wf.step("audit", "receipt", {"audit": True}, after=["charge"])
        return wf.run()

    first = build()
    assert build() == first
    assert counts(sql) == {"charge": 1, "receipt": 2}
    wf = app.workflow(key="order-5")
    wf.step("charge", "charge", {"order": 5})
    with pytest.raises(IdempotencyConflict, match="workflow of 3 jobs; this one has 1"):
        wf.run()
    other = app.workflow()
    other.step("charge", "charge", {"order": 6})
    other.step("receipt", "receipt", {}, after=["charge"], key="k")
    with pytest.raises(InvalidDependency, match="later step of a workflow"):
        other.run()
