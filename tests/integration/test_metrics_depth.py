"""The maintenance child's depth sample (queries.queue_depths) on real PostgreSQL.

The counts are capped and the oldest due row is found by one index probe per priority: these
tests check the figures against rows whose answer is known, and that the query stays on the
partial indexes (no sequential scan of the table).
"""

from __future__ import annotations

import json

from workerpool import sql as queries
from workerpool.model import metrics
from workerpool.runtime.maintenance import Maintenance


def insert(
    sql,
    queue: str,
    state: str,
    count: int,
    *,
    priority: int = 0,
    run_at: str = "now()",
    crashes: int = 0,
) -> None:
    claimed = "'w'" if state == "processing" else "NULL"
    sql(
        f"INSERT INTO workerpool_jobs (queue, task, state, priority, run_at, crashes, claimed_by,"
        f" claimed_at) SELECT %s, 't', %s, %s, {run_at}, %s, {claimed},"
        f" CASE WHEN {claimed} IS NULL THEN NULL ELSE now() END FROM generate_series(1, %s)",
        queue,
        state,
        priority,
        crashes,
        count,
    )


def test_counts_states_suspects_and_the_oldest_due_across_priorities(pool, sql):
    insert(sql, "a", "pending", 5, priority=0, run_at="now() - interval '10 minutes'")
    insert(sql, "a", "pending", 2, priority=9, run_at="now() - interval '1 minute'")
    insert(sql, "a", "failed", 3, priority=-3, run_at="now() - interval '1 hour'", crashes=1)
    insert(sql, "a", "processing", 4)
    insert(sql, "a", "done", 7)
    insert(sql, "a", "waiting", 6)  # held for parents or a sequence: blocked, not queued
    insert(sql, "b", "pending", 2, run_at="now() + interval '1 hour'")  # waiting, not due
    with pool.engine.connect() as conn:
        depths = queries.queue_depths(conn, ["a", "b", "empty"])
    a = depths["a"]
    assert (a["queued"], a["processing"], a["suspects"], a["blocked"]) == (10, 4, 3, 6)
    assert 3590 < a["oldest_due"] < 3700  # the low-priority failed row, an hour old
    assert depths["b"] == {
        "queued": 2,
        "processing": 0,
        "blocked": 0,
        "suspects": 0,
        "oldest_due": 0.0,
        "cap": queries.operations.DEPTH_CAP,
    }
    assert depths["empty"]["queued"] == 0 and depths["empty"]["oldest_due"] == 0.0


def test_counts_stop_at_the_cap(pool, sql):
    insert(sql, "a", "pending", 30)
    with pool.engine.connect() as conn:
        assert queries.queue_depths(conn, ["a"], cap=10)["a"]["queued"] == 10


def test_the_plan_reads_the_partial_indexes_only(pool, sql):
    insert(sql, "a", "done", 50_000)  # the history first: a seq scan would read it all
    insert(sql, "a", "pending", 2000, priority=1)
    insert(sql, "a", "failed", 10)
    sql("VACUUM ANALYZE workerpool_jobs")
    text = queries.operations._DEPTHS.text.replace(":queues", "ARRAY['a']")
    plan = sql(f"EXPLAIN (FORMAT JSON) {text.replace(':cap', '10000')}")[0][0]
    nodes = json.dumps(plan)
    assert "Seq Scan" not in nodes
    assert "ix_workerpool_jobs_due" in nodes and "ix_workerpool_jobs_leased" in nodes
    assert "ix_workerpool_jobs_waiting" in nodes


def test_a_maintenance_pass_samples_only_with_metrics_on(pool, sql, monkeypatch):
    pool.queue("a")
    pool.task(lambda job: None, name="t", queue="a")
    insert(sql, "a", "pending", 3)
    seen = []

    class Capture(metrics.Null):
        enabled = True

        def depth(self, samples):
            seen.append(samples)

    maintenance = Maintenance(pool.registry, pool.engine, worker_id="m")
    maintenance.run_pass()
    assert seen == []  # metrics off: no query at all
    monkeypatch.setattr(metrics, "record", Capture())
    maintenance.run_pass()
    maintenance.run_pass()  # within DEPTH_EVERY: not sampled again
    assert len(seen) == 1 and seen[0]["a"]["queued"] == 3


def test_batches_opened_are_counted_from_the_first_sample_on(pool, sql, monkeypatch):
    pool.queue("a")
    pool.task(lambda job: None, name="t", queue="a")
    opened = []

    class Capture(metrics.Null):
        enabled = True

        def batches_opened(self, count):
            opened.append(count)

    def open_batch():
        with pool.batch(on_complete="t") as batch:
            batch.enqueue("t", {})

    monkeypatch.setattr(metrics, "record", Capture())
    open_batch()  # before the first sample: the count starts after it
    maintenance = Maintenance(pool.registry, pool.engine, worker_id="m")
    maintenance.run_pass()
    for _ in range(3):
        open_batch()
    maintenance._sampled_at = float("-inf")  # the next pass samples again
    maintenance.run_pass()
    maintenance._sampled_at = float("-inf")
    maintenance.run_pass()
    assert opened == [0, 3, 0]
