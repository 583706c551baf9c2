"""The bench's own figures count every job, moved to the history or not (real PostgreSQL).

The maintenance child moves finished jobs out of the jobs table a minute after they end; a
bench run longer than that must still count them.
"""

from __future__ import annotations

from bench.database import BenchDatabase, every_job
from bench.soak import pickup_p99_ms
from workerpool import WorkerPool
from workerpool.runtime.maintenance import Maintenance


def test_the_bench_counts_jobs_moved_to_the_history(pool: WorkerPool, db_url, sql):
    pool.maintenance(history_delay=0)
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, claimed_by, run_at, claimed_at,"
        " finished_at) SELECT 'q', 'noop', 'done', 'w', now() - interval '2 s',"
        " now() - interval '1 s', now() FROM generate_series(1, 3)"
    )
    assert Maintenance(pool.registry, pool.engine, worker_id="m").keep_history() == 3
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    bench_db = BenchDatabase(db_url, keep=db_url.database)  # this test's database, not dropped
    try:
        done, seconds = bench_db.drain_window()
        assert (done, round(seconds)) == (3, 1)
        assert bench_db.sql("SELECT count(*) FROM " + every_job("id", "state = 'done'")) == [(3,)]
        assert round(pickup_p99_ms(bench_db, 3600) or 0) == 1000
    finally:
        bench_db.drop()


def test_a_window_under_the_movers_delay_reads_the_jobs_table_only(pool: WorkerPool, db_url, sql):
    """Every job finished in the window is still in the jobs table; the history has no index on
    ``finished_at``, so reading it would scan every job a long soak has finished."""
    pool.maintenance(history_delay=0)
    insert_done = (
        "INSERT INTO workerpool_jobs (queue, task, state, claimed_by, run_at, claimed_at,"
        " finished_at) SELECT 'q', 'noop', 'done', 'w', now() - interval '{pickup} s',"
        " now(), now() FROM generate_series(1, {n})"
    )
    sql(insert_done.format(pickup=5, n=3))
    assert Maintenance(pool.registry, pool.engine, worker_id="m").keep_history() == 3
    sql(insert_done.format(pickup=2, n=1))
    bench_db = BenchDatabase(db_url, keep=db_url.database)
    try:
        assert round(pickup_p99_ms(bench_db, 30) or 0) == 2000  # not the moved rows' 5 s
        assert round(pickup_p99_ms(bench_db, 3600) or 0) == 5000  # a long window reads both
    finally:
        bench_db.drop()
