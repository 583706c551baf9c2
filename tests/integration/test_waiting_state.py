"""The ``waiting`` state: live (it holds a key of scope 'live'), never claimed, counted.

Rows are put in ``waiting`` directly here; how enqueue gets them there is tested with the
dependencies.
"""

from __future__ import annotations

import pytest

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.migrate import downgrade, upgrade
from workerpool.ops import status
from workerpool.sql import db


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")

    @pool.task(queue="q")
    def work(job):
        return None

    return pool


def hold(sql, job_id: int) -> None:
    sql("UPDATE workerpool_jobs SET state = 'waiting' WHERE id = %s", job_id)


def claim(app: WorkerPool):
    with app.engine.begin() as conn:
        return queries.claim(
            conn,
            queue="q",
            worker="w",
            limit=10,
            task_versions=app.registry.task_versions("q"),
        )


def test_a_waiting_job_is_never_claimed_and_spends_no_attempt(app, sql):
    job_id = app.enqueue("work", {})
    hold(sql, job_id)
    assert claim(app) == []
    assert sql("SELECT state, attempts FROM workerpool_jobs WHERE id = %s", job_id) == [
        ("waiting", 0)
    ]


def test_a_waiting_job_holds_its_live_key(app, sql):
    first = app.enqueue("work", {"n": 1}, key="k", unique="live")
    hold(sql, first)
    assert app.enqueue("work", {"n": 2}, key="k", unique="live") == first
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 1


def test_cancelling_a_waiting_job_ends_it_at_once(app, sql):
    job_id = app.enqueue("work", {})
    hold(sql, job_id)
    app.cancel([job_id], reason="not needed")
    assert sql(
        "SELECT state, finished_at IS NOT NULL FROM workerpool_jobs WHERE id = %s", job_id
    ) == [("cancelled", True)]


def test_status_depths_and_the_dashboard_count_waiting_jobs(app, sql):
    ids = [app.enqueue("work", {"n": i}) for i in range(3)]
    for job_id in ids[:2]:
        hold(sql, job_id)
    report = status.collect(app.engine)
    counts = report["queues"]["q"]["counts"]
    assert (counts["waiting"], counts["pending"]) == (2, 1)
    assert "waiting" not in report["queues"]["q"]["estimated"]
    assert "WAITING" in status.render_queues(report["queues"])
    with app.engine.connect() as conn:
        assert queries.queue_depths(conn, ["q"])["q"]["blocked"] == 2


def test_the_migration_adds_waiting_to_the_check_and_the_key_index(empty_db_url):
    upgrade(empty_db_url)
    engine = db.create(empty_db_url)
    with engine.connect() as conn:
        index = conn.exec_driver_sql(
            "SELECT pg_get_indexdef('uq_workerpool_jobs_key'::regclass)"
        ).scalar()
        check = conn.exec_driver_sql(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'ck_workerpool_jobs_state'"
        ).scalar()
    engine.dispose()
    assert "'waiting'" in index and "'waiting'" in check
    downgrade(empty_db_url, "0010")
    engine = db.create(empty_db_url)
    with engine.connect() as conn:
        index = conn.exec_driver_sql(
            "SELECT pg_get_indexdef('uq_workerpool_jobs_key'::regclass)"
        ).scalar()
    engine.dispose()
    assert "'waiting'" not in index
    upgrade(empty_db_url)
