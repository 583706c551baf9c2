"""Limits in the claim (global concurrency, rate, per key), against real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from tests.helpers.limited import claim, claim_at_once
from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.limits import claim_limits
from workerpool.sql.schema import RATE_SLICES


def make_app(pool: WorkerPool, **queue: object) -> WorkerPool:
    pool.queue("q", stale_after=300, **queue)
    return pool


def finish(sql, ids) -> None:
    sql(
        "UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = ANY(%s)",
        list(ids),
    )


def test_global_concurrency_caps_processing_rows_whoever_claims(pool, sql):
    app = make_app(pool, global_concurrency=3)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(10)])
    first = claim(app, "w1", limit=2)
    second = claim(app, "w2", limit=10)
    assert (len(first), len(second)) == (2, 1)
    assert claim(app, "w3") == []
    finish(sql, [first[0].id])
    assert len(claim(app, "w3")) == 1  # a slot freed is a slot taken
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(3,)]


def test_a_job_held_by_a_limit_spends_no_attempt(pool, sql):
    app = make_app(pool, global_concurrency=1)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    claim(app, "w1")
    for _ in range(5):
        assert claim(app, "w2") == []
    assert sql("SELECT attempts FROM workerpool_jobs WHERE state = 'pending'") == [(0,), (0,)]


def test_concurrent_claims_never_exceed_the_global_limit(pool, sql):
    app = make_app(pool, global_concurrency=4)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(200)])
    claimed = claim_at_once(app)
    assert len(claimed) == 4
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(4,)]


def test_per_key_limit_takes_other_keys_instead_of_waiting_behind_a_full_key(pool, sql):
    app = make_app(pool)
    app.task(lambda job: None, queue="q", name="sync", concurrency_limit=1)
    # key a first in claim order, many of them: a claim must reach past them to b and c
    app.enqueue_many(
        [("sync", {"n": n}, {"concurrency_key": "a"}) for n in range(30)]
        + [("sync", {"n": n}, {"concurrency_key": k}) for n, k in enumerate(["b", "c"])]
    )
    rows = claim(app, "w1", limit=10)
    keys = sql("SELECT concurrency_key FROM workerpool_jobs WHERE state = 'processing' ORDER BY 1")
    assert [k for (k,) in keys] == ["a", "b", "c"] and len(rows) == 3
    assert claim(app, "w2") == []  # every key at its limit: nothing, not a second "a"
    finish(sql, [rows[0].id])
    again = claim(app, "w2")
    assert len(again) == 1


def test_per_key_limit_of_two_lets_two_of_a_key_run(pool, sql):
    app = make_app(pool)
    app.task(
        lambda job: None,
        queue="q",
        name="sync",
        concurrency_limit=2,
        concurrency_key=lambda payload: f"account:{payload['account']}",
    )
    app.enqueue_many([("sync", {"account": n % 3, "n": n}) for n in range(12)])
    assert len(claim(app, "w1", limit=10)) == 6
    assert sql(
        "SELECT concurrency_key, count(*) FROM workerpool_jobs WHERE state ="
        " 'processing' GROUP BY 1 ORDER BY 1"
    ) == [("account:0", 2), ("account:1", 2), ("account:2", 2)]


def test_a_task_without_a_key_function_shares_one_key_its_name(pool, sql):
    app = make_app(pool)
    app.task(lambda job: None, queue="q", name="report", concurrency_limit=1)
    app.task(lambda job: None, queue="q", name="free")
    app.enqueue_many(
        [("report", {"n": n}) for n in range(3)] + [("free", {"n": n}) for n in range(3)]
    )
    assert len(claim(app, "w1", limit=10)) == 4  # one report, every free job
    assert sql("SELECT DISTINCT concurrency_key FROM workerpool_jobs WHERE task = 'report'") == [
        ("report",)
    ]


def test_queue_rate_limit_counts_starts_in_the_window(pool, sql):
    app = make_app(pool, rate_limit="5/m")
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(20)])
    assert len(claim(app, "w1", limit=3)) == 3
    finish(
        sql, [row for (row,) in sql("SELECT id FROM workerpool_jobs WHERE state = 'processing'")]
    )
    assert len(claim(app, "w2", limit=10)) == 2  # finished or not, a start counts in its window
    assert claim(app, "w3") == []
    # a window and a slice later (the ring's slices: workerpool.sql.limits_rates)
    sql("UPDATE workerpool_rate_counts SET slice = slice - %s", RATE_SLICES + 1)
    assert len(claim(app, "w3")) == 5  # the window moved on


def test_key_rate_limit_holds_per_key(pool, sql):
    app = make_app(pool)
    app.task(lambda job: None, queue="q", name="call", key_rate_limit="2/h")
    app.enqueue_many([("call", {"n": n}, {"concurrency_key": f"api:{n % 2}"}) for n in range(10)])
    assert len(claim(app, "w1", limit=10)) == 4
    finish(
        sql, [row for (row,) in sql("SELECT id FROM workerpool_jobs WHERE state = 'processing'")]
    )
    assert claim(app, "w2") == []


def test_a_queue_without_limits_claims_with_the_unlimited_statement(pool):
    app = make_app(pool)
    app.task(lambda job: None, queue="q", name="work")
    limits = claim_limits(app.registry.queue_spec("q"), app.tasks)
    assert not limits
    plain = queries.claim_statement(
        queue="q",
        worker="w",
        limit=5,
        task_versions={"work": 1},
    )
    same = queries.claim_statement(
        queue="q", worker="w", limit=5, task_versions={"work": 1}, limits=limits
    )
    assert str(plain) == str(same)


@pytest.mark.parametrize("alone", [False, True])
def test_limited_claim_keeps_suspects_alone(pool, sql, alone):
    app = make_app(pool, global_concurrency=10)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    sql("UPDATE workerpool_jobs SET crashes = 1 WHERE payload->>'n' = '0'")
    limits = claim_limits(app.registry.queue_spec("q"), app.tasks)
    with app.engine.begin() as conn:
        rows = queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=10,
            task_versions=app.registry.task_versions("q"),
            alone=alone,
            limits=limits,
        )
    assert sorted(row.crashes for row in rows) == ([1] if alone else [0, 0])


def test_a_backlog_of_one_busy_key_does_not_hide_other_keys_behind_it(pool, sql):
    """The walk in claim order reads a bounded number of rows; the key spread finds the rest."""
    app = make_app(pool)
    app.task(lambda job: None, queue="q", name="sync", concurrency_limit=1)
    app.enqueue_many(
        [
            (
                "sync",
                {"n": n},
                {"concurrency_key": "busy", "run_at": datetime(2020, 1, 1, tzinfo=UTC)},
            )
            for n in range(1500)
        ]
    )
    app.enqueue_many([("sync", {"n": n}, {"concurrency_key": f"other:{n}"}) for n in range(3)])
    assert [row.concurrency_key for row in claim(app, "w1", limit=1)] == ["busy"]
    # 1,499 rows of a full key come first in claim order, far more than the walk reads
    rows = claim(app, "w2", limit=2)
    assert sorted(row.concurrency_key for row in rows) == ["other:0", "other:1"]
    assert [row.concurrency_key for row in claim(app, "w3", limit=5)] == ["other:2"]
    assert claim(app, "w4", limit=5) == []


def register(app: WorkerPool, worker: str, capacity: int | None) -> None:
    with app.engine.begin() as conn:
        queries.register_worker(
            conn, worker, host="h", pid=1, queue="q", tasks={"work": 1}, capacity=capacity
        )


def shared_claim(app: WorkerPool, worker: str, limit: int):
    limits = claim_limits(app.registry.queue_spec("q"), app.tasks)
    with app.engine.begin() as conn:
        return queries.claim(
            conn,
            queue="q",
            worker=worker,
            limit=limit,
            task_versions=app.registry.task_versions("q"),
            limits=limits,
            shared=True,
        )


def test_a_limit_out_of_the_fleets_reach_is_claimed_under_the_shared_lock(pool, sql):
    app = make_app(pool, global_concurrency=24)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(100)])
    for n in range(8):
        register(app, f"w{n}", capacity=3)  # 8 x 3 = 24: the limit cannot be passed
    rows = claim(app, "w0", limit=3)
    assert len(rows) == 3 and all(row.limits_safe for row in rows)
    start = threading.Barrier(7)
    claimed: list[int] = []

    def claimer(n: int) -> None:
        start.wait()
        claimed.extend(row.id for row in shared_claim(app, f"w{n}", limit=3))

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(1, 8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 21
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(24,)]


@pytest.mark.parametrize(
    "fleet",
    [
        [("w0", 3), ("w1", 3)],  # 6 > 5: the fleet could pass the limit
        [("w0", 3), ("w1", None)],  # a worker of unknown capacity
        [("other", 1)],  # the claiming worker is not registered
    ],
)
def test_a_limit_within_the_fleets_reach_is_never_claimed_under_the_shared_lock(pool, sql, fleet):
    app = make_app(pool, global_concurrency=5)
    app.task(lambda job: None, queue="q", name="work")
    app.enqueue_many([("work", {"n": n}) for n in range(10)])
    for worker, capacity in fleet:
        register(app, worker, capacity)
    rows = claim(app, "w0", limit=2)
    assert len(rows) == 2 and not any(row.limits_safe for row in rows)
    assert shared_claim(app, "w0", limit=2) == []  # it says so; the worker then goes exclusive
