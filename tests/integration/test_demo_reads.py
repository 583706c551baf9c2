"""The demo's own checks read every job, moved to the history or not (real PostgreSQL).

The maintenance child moves finished jobs out of the jobs table a minute after they end; a demo
slower than that (a loaded machine) must still count them.
"""

from __future__ import annotations

import json

from workerpool import WorkerPool
from workerpool.runtime.maintenance import Maintenance
from workerpool_demo import app as demo

EARLY, LATE = "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00"


def test_the_demos_checks_count_jobs_moved_to_the_history(pool: WorkerPool, sql):
    pool.maintenance(history_delay=0)
    demo.create_tables(pool.engine)
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at, payload, steps)"
        " VALUES ('q', 'export_data', 'done', now(), %s, %s)",
        json.dumps({"user_id": 1}),
        json.dumps({"export_approved:1": {"started_at": EARLY, "finished_at": LATE}}),
    )
    [(deletion,)] = sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at, steps)"
        " VALUES ('q', 'delete_user', 'done', now(), %s) RETURNING id",
        json.dumps({"erase": {"finished_at": EARLY}}),
    )
    sql(
        "INSERT INTO demo_deletion_steps (job_id, user_id, attempt, step, at)"
        " VALUES (%s, 1, 2, 'erase', %s)",
        deletion,
        LATE,
    )  # ran again after it was recorded
    assert Maintenance(pool.registry, pool.engine, worker_id="m").keep_history() == 2
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    with pool.engine.connect() as conn:
        assert demo.export_report(conn)["done"] == 1 and demo.export_report(conn)["waited"] == 1
        assert demo.steps_run_again(conn) == [f"#{deletion} erase"]
