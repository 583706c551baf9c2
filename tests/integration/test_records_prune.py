"""What outlives its jobs is pruned by the maintenance child, on real PostgreSQL: the edges of
jobs that are gone (pruned, or moved and then dropped with their partition), a bounded scan per
pass that goes on where the last one stopped; and signals older than the retention."""

from __future__ import annotations

import pytest

from workerpool import WorkerPool, testing
from workerpool.runtime.maintenance.duties import Maintenance
from workerpool.sql import dependencies as deps_sql


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")
    pool.maintenance(history_delay=0, retention=3600)

    @pool.task(queue="q")
    def step(job):
        return None

    @pool.task(queue="q", result_ttl=3600)  # its rows stay in the jobs table, pruned by age
    def kept(job):
        return None

    return pool


def edges(sql) -> list[int]:
    return [
        job_id
        for (job_id,) in sql("SELECT job_id FROM workerpool_job_dependencies ORDER BY job_id")
    ]


def maintenance(app: WorkerPool) -> Maintenance:
    return Maintenance(app.registry, app.engine, worker_id="m")


def test_edges_stay_while_their_job_is_in_either_table_and_go_with_it(app, sql):
    parent = app.enqueue("step", {})
    moved = app.enqueue("step", {}, after=[parent])
    kept = app.enqueue("kept", {}, after=[parent])
    waiting = app.enqueue("step", {}, after=[app.enqueue("step", {}, delay=3600)])
    testing.drain(app, "q")
    keeper = maintenance(app)
    keeper.keep_history()  # moves the done jobs: edges stay (the workflow page reads them)
    assert sql("SELECT count(*) FROM workerpool_jobs_history WHERE id = %s", moved) == [(1,)]
    assert keeper.prune_records() == 0
    assert edges(sql) == [moved, kept, waiting]

    sql("DELETE FROM workerpool_jobs_history WHERE id = %s", moved)  # as its partition's drop
    sql("UPDATE workerpool_jobs SET finished_at = now() - interval '2 hours' WHERE id = %s", kept)
    keeper.prune_finished()
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE id = %s", kept) == [(0,)]
    keeper._records_pruned_at = float("-inf")  # its next minute, now
    # one bounded scan, from the start again: the first pass read every edge
    assert keeper.prune_records() == 2
    assert edges(sql) == [waiting]


def test_each_pass_scans_a_bounded_slice_and_the_next_goes_on_from_there(app, sql):
    parent = app.enqueue("step", {})
    children = [app.enqueue("step", {}, after=[parent]) for _ in range(5)]
    testing.drain(app, "q")
    sql("DELETE FROM workerpool_jobs WHERE id = ANY(%s)", children[:2] + children[3:])
    with app.engine.begin() as conn:
        assert deps_sql.prune_orphans(conn, 0, 2) == (children[1], 2)
        assert deps_sql.prune_orphans(conn, children[1], 2) == (children[3], 1)  # [2] stays
        assert deps_sql.prune_orphans(conn, children[3], 2) == (0, 1)  # the end: start over
    assert edges(sql) == [children[2]]


def test_signals_older_than_the_retention_are_pruned(app, sql):
    app.signal("old", {"n": 1})
    app.signal("new", {"n": 2})
    sql("UPDATE workerpool_signals SET sent_at = now() - interval '2 hours' WHERE name = 'old'")
    assert maintenance(app).prune_records() == 1
    assert sql("SELECT name FROM workerpool_signals") == [("new",)]
    app.signal("old", {"n": 3})  # the name is free again: a new signal
    assert sql("SELECT payload FROM workerpool_signals WHERE name = 'old'") == [({"n": 3},)]
