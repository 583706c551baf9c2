"""A queue's rate limit counts claims in a ring of slices (workerpool.sql.limits_rates)."""

from __future__ import annotations

from tests.helpers.limited import claim, claim_at_once
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.limits import claim_limits
from workerpool.sql.schema import RATE_SLICES


def rated(pool: WorkerPool, rate: str) -> WorkerPool:
    pool.queue("q", stale_after=300, rate_limit=rate)
    pool.task(lambda job: None, queue="q", name="work")
    return pool


def at_a_slice_start(sql, window_s: int) -> None:
    """Wait until the database clock has just entered a new slice of ``window_s``'s ring, so
    that the claims of a test that needs one slice all fall in it (a slice of a minute's window
    is 6 s; crossing into the next mid-test would put them in two)."""
    wait_until(
        lambda: (
            sql(
                "SELECT (extract(epoch FROM statement_timestamp()) * %s / %s) %% 1",
                RATE_SLICES,
                window_s,
            )[0][0]
            < 0.15
        ),
        timeout=window_s / RATE_SLICES * 2 + 5,
        interval=0.01,
        message="the start of a rate slice",
    )


def ring(sql) -> list[tuple]:
    return sql("SELECT slice, claims FROM workerpool_rate_counts WHERE queue = 'q'")


def test_concurrent_claims_never_pass_the_rate_limit(pool, sql):
    app = rated(pool, "7/h")
    app.enqueue_many([("work", {"n": n}) for n in range(100)])
    claimed = claim_at_once(app)
    assert len(claimed) == 7
    assert [claims for _, claims in ring(sql)] == [7]  # one slice, every claim added to it


def test_a_crash_release_gives_no_start_back(pool, sql):
    """A start stays a start: the count has nothing to undo, so nothing to drift."""
    app = rated(pool, "5/m")
    app.enqueue_many([("work", {"n": n}) for n in range(10)])
    assert len(claim(app, "w1", limit=3)) == 3
    with app.engine.begin() as conn:
        assert len(queries.reclaim_from_dead_worker(conn, "w1")) == 3  # back to pending
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'") == [(0,)]
    assert len(claim(app, "w2")) == 2


def test_a_slot_is_started_afresh_by_the_slice_that_takes_it_over(pool, sql):
    app = rated(pool, "5/m")
    app.enqueue_many([("work", {"n": n}) for n in range(20)])
    at_a_slice_start(sql, 60)
    assert len(claim(app, "w1", limit=3)) == 3
    [(now, _)] = ring(sql)
    # the same slot, one ring earlier: out of every window the claim counts
    sql("UPDATE workerpool_rate_counts SET slice = slice - %s", RATE_SLICES + 1)
    assert len(claim(app, "w2")) == 5
    assert ring(sql) == [(now, 5)]  # 5, not 3 + 5: the old slice's claims are gone


def test_a_claim_older_than_its_slot_leaves_the_newer_slice_alone(pool, sql):
    """A claim that waited past its slice's turn must not wipe the count of the slice now in its
    slot (that would let the next claims pass the limit)."""
    app = rated(pool, "5/m")
    app.enqueue_many([("work", {"n": n}) for n in range(20)])
    at_a_slice_start(sql, 60)
    assert len(claim(app, "w1", limit=3)) == 3
    [(now, _)] = ring(sql)
    sql("UPDATE workerpool_rate_counts SET slice = slice + %s", RATE_SLICES + 1)
    assert len(claim(app, "w2")) == 2  # the newer slice's 3 count
    assert ring(sql) == [(now + RATE_SLICES + 1, 3)]


def test_a_rate_limited_claim_counts_in_the_ring_and_stamps_each_attempts_start(pool, sql):
    app = rated(pool, "100/s")
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    assert len(claim(app, "w1")) == 3
    assert sum(claims for _, claims in ring(sql)) == 3
    # the start is the attempt's (waited and ran times), as every claim stamps it
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE started_at = claimed_at") == [(3,)]


def test_status_and_the_why_line_read_the_ring(pool):
    from workerpool.ops import status, why

    app = rated(pool, "5/m")
    ids = app.enqueue_many([("work", {"n": n}) for n in range(8)])
    limits = claim_limits(app.registry.queue_spec("q"), app.tasks)
    with app.engine.begin() as conn:
        queries.publish_limits(conn, "q", limits.as_json())
    assert len(claim(app, "w1")) == 5
    usage = status.collect(app.engine)["queues"]["q"]["limits"]["rate_limit"]
    assert usage == {"limit": "5/m", "started": 5, "held": 3}
    with app.engine.connect() as conn:
        line = why.line(why.explain(conn, ids[-1]))
    assert "held by rate_limit 5/m of queue q (5 started)" in line


def test_a_rate_limit_and_per_key_limits_hold_together(pool, sql):
    pool.queue("q", stale_after=300, rate_limit="5/m")
    pool.task(
        lambda job: None,
        queue="q",
        name="sync",
        concurrency_limit=1,
        key_rate_limit="100/h",
        concurrency_key=lambda payload: f"k{payload['n'] % 3}",
    )
    pool.enqueue_many([("sync", {"n": n}) for n in range(12)])
    rows = claim(pool, "w1")
    assert sorted(row.concurrency_key for row in rows) == ["k0", "k1", "k2"]
    assert [claims for _, claims in ring(sql)] == [3]
    sql("UPDATE workerpool_jobs SET state = 'done' WHERE state = 'processing'")
    assert len(claim(pool, "w2")) == 2  # the queue's 5 per minute, whatever the keys allow


def test_maintenance_prunes_the_slots_of_windows_no_claim_reads(pool, sql):
    """A limit removed or changed leaves its window's slots behind; the maintenance child
    deletes them once no claim can count them, and leaves the slots in use alone."""
    from workerpool.runtime.maintenance.duties import Maintenance
    from workerpool.sql.limits_rates import PRUNE_AFTER

    app = rated(pool, "5/m")
    app.enqueue_many([("work", {"n": n}) for n in range(20)])
    assert len(claim(app, "w1", limit=3)) == 3
    [(now, _)] = ring(sql)
    slice_s = 60 / RATE_SLICES
    # an hourly window last used two hours ago, and a slot of this window past the margin
    sql(
        "INSERT INTO workerpool_rate_counts (queue, window_s, slot, slice, claims) VALUES"
        " ('q', 3600, 0, floor(extract(epoch FROM now()) / 360)::bigint - 20, 4),"
        " ('q', 60, %s, %s, 2)",
        (now + 1) % (RATE_SLICES + 1),
        now - int((60 + PRUNE_AFTER) / slice_s) - 2,
    )
    assert Maintenance(app.registry, app.engine, worker_id="m").prune_rate_counts() == 2
    assert ring(sql) == [(now, 3)]
    assert len(claim(app, "w2")) == 2  # the count in use is untouched
