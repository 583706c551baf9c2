"""The claim (DESIGN §3) and every state transition, against real PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.sql import Lease


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", stale_after=300)

    @pool.task(queue="q", max_attempts=3)
    def work(job):
        return None

    return pool


def claim(
    app: WorkerPool, worker: str, limit: int = 10, stale_after: float = 300, *, alone: bool = False
):
    with app.engine.begin() as conn:
        return queries.claim(
            conn,
            queue="q",
            worker=worker,
            limit=limit,
            task_versions=app.registry.task_versions("q"),
            alone=alone,
        )


def test_claim_counts_the_attempt_and_takes_the_lease(app, sql):
    job_id = app.enqueue("work", {})
    [row] = claim(app, "w1")
    assert (row.id, row.attempts) == (job_id, 1)
    assert sql("SELECT state, claimed_by, claimed_at <= now() FROM workerpool_jobs") == [
        ("processing", "w1", True)
    ]


def test_a_claimed_row_is_a_plain_named_tuple_of_the_claims_columns(app):
    """Not a SQLAlchemy Row: the worker reads each claimed row's columns some twenty-five
    times, and a Row's attribute costs about fifteen times a named tuple's."""
    job_id = app.enqueue("work", {"n": 1})
    [row] = claim(app, "w1")
    assert type(row).__bases__ == (tuple,)
    assert row._fields == tuple(column.name for column in queries.CLAIM_COLUMNS)
    assert (row.id, row.payload, row.attempts) == (job_id, {"n": 1}, 1)


def test_claim_never_returns_more_rows_than_asked(app):
    app.enqueue_many([("work", {"n": i}) for i in range(20)])
    assert len(claim(app, "w1", limit=7)) == 7
    assert len(claim(app, "w2", limit=100)) == 13
    assert claim(app, "w3") == []


def test_claim_orders_by_priority_then_run_at(app):
    low = app.enqueue("work", {}, priority=0)
    high = app.enqueue("work", {}, priority=5)
    assert [r.id for r in claim(app, "w", limit=1)] == [high]
    assert [r.id for r in claim(app, "w", limit=1)] == [low]


def test_future_jobs_are_not_claimed(app):
    app.enqueue("work", {}, delay=60)
    assert claim(app, "w") == []


def test_the_prepared_claim_reuses_one_plan_on_a_connection(app, sql):
    """The claim is prepared after a few calls; its states are literals, so PostgreSQL can
    match the partial indexes in a generic plan and stops planning it on every call. (With
    parameters, a table of some size makes every generic plan a sequential scan: custom plans
    forever.)"""
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " SELECT 'q', 'work', 'done', now() FROM generate_series(1, 20000)"
    )
    sql("ANALYZE workerpool_jobs")
    with app.engine.connect() as conn:  # psycopg prepares at the 5th call; 5 custom plans follow
        for _ in range(15):
            with conn.begin():
                queries.claim(
                    conn,
                    queue="q",
                    worker="w",
                    limit=10,
                    task_versions=app.registry.task_versions("q"),
                )
        plans = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
        ).all()
    assert len(plans) == 1 and plans[0][0] > 0, plans


def test_concurrent_claimers_never_share_a_row(app, db_url, sql):
    total = 600
    app.enqueue_many([("work", {"n": i}) for i in range(total)])
    got: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def claimer(index: int) -> None:
        pool = WorkerPool(db_url)
        pool.queue("q")
        pool.task(queue="q", max_attempts=3, name="work")(lambda job: None)
        barrier.wait()
        while rows := claim(pool, f"w{index}", limit=5):
            assert len(rows) <= 5
            with lock:
                got.extend(r.id for r in rows)
        pool.dispose()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == total
    assert len(set(got)) == total
    assert sql("SELECT attempts, count(*) FROM workerpool_jobs GROUP BY attempts") == [(1, total)]


def test_stale_arm_boundary(app, sql):
    inside, outside = app.enqueue("work", {}), app.enqueue("work", {})
    claim(app, "dead-worker")
    sql(
        "UPDATE workerpool_jobs SET claimed_at = now() - interval '299 seconds' WHERE id = %s",
        inside,
    )
    sql(
        "UPDATE workerpool_jobs SET claimed_at = now() - interval '301 seconds' WHERE id = %s",
        outside,
    )
    assert claim(app, "rescuer") == []  # the claim does not take stale leases; the recovery
    with app.engine.begin() as conn:  # (a worker's renewal beat) attributes them
        assert [r.id for r in queries.recover_stale(conn, "q", 300).rows] == [outside]
    assert sql("SELECT state, attempts, crashes FROM workerpool_jobs WHERE id = %s", outside) == [
        ("pending", 0, 1)
    ]  # its lost worker held two jobs: attempt refunded, a suspect
    assert sql("SELECT claimed_by FROM workerpool_jobs WHERE id = %s", inside) == [("dead-worker",)]
    with app.engine.begin() as conn:
        [rerun] = queries.claim(
            conn,
            queue="q",
            worker="rescuer",
            limit=10,
            alone=True,
            task_versions=app.registry.task_versions("q"),
        )
    assert (rerun.id, rerun.attempts) == (outside, 1)


def test_exhausted_rows_are_never_claimed_and_are_swept_to_abandoned(app, sql):
    stale = app.enqueue("work", {})
    fresh = app.enqueue("work", {})
    due = app.enqueue("work", {})
    sql(
        "UPDATE workerpool_jobs SET state='processing', attempts=3, claimed_by='gone',"
        " claimed_at = now() - interval '10 minutes' WHERE id = %s",
        stale,
    )
    sql(
        "UPDATE workerpool_jobs SET state='processing', attempts=3, claimed_by='other',"
        " claimed_at = now() - interval '299 seconds' WHERE id = %s",
        fresh,
    )
    sql("UPDATE workerpool_jobs SET state='failed', attempts=3 WHERE id = %s", due)
    assert claim(app, "w") == []
    with app.engine.begin() as conn:
        swept = queries.sweep_abandoned(conn, "q", 300).rows
    assert [r.id for r in swept] == [stale]
    rows = dict(
        (r[0], r[1:])
        for r in sql(
            "SELECT id, state, dead_reason, errors->-1->>'type', finished_at IS NOT NULL"
            " FROM workerpool_jobs"
        )
    )
    assert rows[stale] == ("dead", "abandoned", "WorkerLost", True)
    assert rows[fresh][0] == "processing"


def lease_of(row, worker: str) -> Lease:
    return Lease(row.id, row.attempts, worker)


def test_complete_with_a_lost_lease_changes_nothing(app, sql):
    app.enqueue("work", {})
    [first] = claim(app, "w1")
    sql("UPDATE workerpool_jobs SET claimed_at = now() - interval '1 hour'")
    assert claim(app, "w2") == []  # a stale lease is not claimed but recovered: charged,
    with app.engine.begin() as conn:
        queries.recover_stale(conn, "q", 300)
    sql("UPDATE workerpool_jobs SET run_at = now()")  # held back a moment (skipped here),
    [second] = claim(app, "w2", alone=True)  # then run alone, on attempt 2
    assert second.attempts == 2
    with app.engine.begin() as conn:
        assert queries.complete(conn, "w1", [(first.id, first.attempts)]) == set()
        assert queries.fail(conn, lease_of(first, "w1"), {"type": "X"}, 1.0) is None
        assert queries.mark_permanent(conn, lease_of(first, "w1"), {"type": "X"}) is False
        assert queries.snooze(conn, lease_of(first, "w1"), 1.0) is None
        assert queries.give_back(conn, lease_of(first, "w1"), {"type": "X"}) is None
        assert queries.save_checkpoint(conn, lease_of(first, "w1"), '{"s": 1}') is False
        assert queries.renew(conn, "w1", [(first.id, first.attempts)]) == set()
    assert sql(
        "SELECT state, claimed_by, attempts, checkpoint, errors->-1->>'worker' FROM workerpool_jobs"
    ) == [("processing", "w2", 2, None, "w1")]
    with app.engine.begin() as conn:
        assert queries.complete(conn, "w2", [(second.id, second.attempts)]) == {second.id}
    assert sql("SELECT state FROM workerpool_jobs") == [("done",)]


def test_fail_schedules_a_retry_then_dead_exhausted_at_the_cap(app, sql):
    app.enqueue("work", {})
    for attempt in (1, 2, 3):
        sql("UPDATE workerpool_jobs SET run_at = now() WHERE state = 'failed'")
        [row] = claim(app, "w")
        assert row.attempts == attempt
        with app.engine.begin() as conn:
            state = queries.fail(
                conn, lease_of(row, "w"), {"type": "Boom", "message": str(attempt)}, 30
            )
        assert state == ("dead" if attempt == 3 else "failed")
        if attempt < 3:
            assert sql(
                "SELECT run_at - now() BETWEEN interval '29 s' AND interval '31 s'"
                " FROM workerpool_jobs"
            ) == [(True,)]
    state, reason, errors = sql("SELECT state, dead_reason, errors FROM workerpool_jobs")[0]
    assert (state, reason) == ("dead", "exhausted")
    assert [e["message"] for e in errors] == ["1", "2", "3"]
    assert all("at" in e for e in errors)


def test_permanent_goes_dead_at_once(app, sql):
    app.enqueue("work", {})
    [row] = claim(app, "w")
    with app.engine.begin() as conn:
        assert queries.mark_permanent(
            conn, lease_of(row, "w"), {"type": "Permanent", "message": "422"}
        )
    assert sql("SELECT state, dead_reason, attempts FROM workerpool_jobs") == [
        ("dead", "permanent", 1)
    ]


def test_snooze_does_not_spend_an_attempt(app, sql):
    app.enqueue("work", {})
    for _ in range(5):  # more snoozes than max_attempts: never dead
        sql("UPDATE workerpool_jobs SET run_at = now()")
        [row] = claim(app, "w")
        assert row.attempts == 1
        with app.engine.begin() as conn:
            assert queries.snooze(conn, lease_of(row, "w"), 10)
    assert sql("SELECT state, attempts, run_at > now() FROM workerpool_jobs") == [
        ("pending", 0, True)
    ]


def test_release_refunds_the_attempt_keeps_the_checkpoint_and_records_why(app, sql):
    app.enqueue("work", {})
    [row] = claim(app, "w")
    with app.engine.begin() as conn:
        assert queries.save_checkpoint(conn, lease_of(row, "w"), '{"step": 2}')
        assert queries.give_back(
            conn, lease_of(row, "w"), {"type": "Interrupted", "message": "drain"}
        )
    state, attempts, checkpoint, errors = sql(
        "SELECT state, attempts, checkpoint, errors FROM workerpool_jobs"
    )[0]
    assert (state, attempts, checkpoint) == ("pending", 0, {"step": 2})
    assert [e["type"] for e in errors] == ["Interrupted"]
    # Held for RELEASE_HOLD: the exiting process's handler may still be running.
    assert claim(app, "w2") == []
    assert sql("SELECT run_at > now() + interval '2 seconds' FROM workerpool_jobs") == [(True,)]
    sql("UPDATE workerpool_jobs SET run_at = now()")
    [again] = claim(app, "w2")
    assert (again.attempts, again.checkpoint) == (1, {"step": 2})


def test_renew_moves_claimed_at_forward(app, sql):
    app.enqueue("work", {})
    [row] = claim(app, "w")
    sql("UPDATE workerpool_jobs SET claimed_at = now() - interval '250 seconds'")
    with app.engine.begin() as conn:
        assert queries.renew(conn, "w", [(row.id, row.attempts)]) == {row.id}
    sql("SELECT pg_sleep(0)")
    assert (
        claim(
            app,
            "thief",
        )
        == []
    )


def test_reclaim_from_a_dead_worker_touches_only_its_rows(app, sql):
    ids = app.enqueue_many([("work", {"n": i}) for i in range(3)])
    claim(app, "crashed")
    other = app.enqueue("work", {})
    claim(app, "alive")
    with app.engine.begin() as conn:
        changed = queries.reclaim_from_dead_worker(conn, "crashed")
    assert sorted(r.id for r in changed) == ids
    rows = dict(
        (r[0], r[1:]) for r in sql("SELECT id, state, attempts, crashes FROM workerpool_jobs")
    )
    assert all(rows[i] == ("pending", 0, 1) for i in ids)  # held together: refunded suspects
    assert rows[other] == ("processing", 1, 0)


def test_payload_version_newer_than_the_worker_knows_is_left_alone(app, db_url, sql):
    newer = WorkerPool(db_url)
    newer.task(queue="q", name="work", version=2)(lambda job: None)
    new_id = newer.enqueue("work", {"shape": 2})
    old_id = app.enqueue("work", {"shape": 1})
    assert [r.id for r in claim(app, "old-worker")] == [old_id]
    with newer.engine.begin() as conn:
        rows = queries.claim(
            conn,
            queue="q",
            worker="new",
            limit=5,
            task_versions=newer.registry.task_versions("q"),
        )
    assert [r.id for r in rows] == [new_id]
    newer.dispose()


def test_unknown_tasks_are_not_claimed(app, sql):
    sql("INSERT INTO workerpool_jobs (queue, task) VALUES ('q', 'removed_task')")
    assert claim(app, "w") == []


def test_worker_registry_register_beat_prune(app, sql):
    with app.engine.begin() as conn:
        queries.register_worker(conn, "h:1:a", host="h", pid=1, queue="q", tasks={"work": 1})
        queries.register_worker(conn, "h:2:b", host="h", pid=2, queue="q", tasks={"work": 1})
    sql("UPDATE workerpool_workers SET last_seen = now() - interval '1 hour' WHERE id = 'h:2:b'")
    with app.engine.begin() as conn:
        assert queries.beat_worker(conn, "h:1:a") is True
        assert queries.prune_workers(conn, 60) == ["h:2:b"]
        assert queries.beat_worker(conn, "h:2:b") is False
        queries.unregister_worker(conn, "h:1:a")
    assert sql("SELECT count(*) FROM workerpool_workers") == [(0,)]
