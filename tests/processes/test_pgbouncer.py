"""workerpool behind a real PgBouncer in transaction pooling mode (DESIGN §10, research Q15).

Each test starts its own ``pgbouncer`` (``pool_mode = transaction``, ``default_pool_size = 2``) in
front of the test database and runs `workerpool run tests.apps.bouncer:pool` through it: every
connection of the supervisor's children, of the handlers and of the test's enqueues goes through
the bouncer, so at most two PostgreSQL backends serve them all.

CI (``CI`` set) must have pgbouncer installed (``.ci/run`` installs it): there a missing binary
fails the test. Locally it is skipped with the reason.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest
from sqlalchemy.engine import URL

from tests.apps import bouncer as app
from tests.helpers.paths import ROOT
from tests.helpers.pgbouncer import BROKEN, POOL_SIZE, Bouncer
from tests.helpers.processes import Supervisor, alive
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.client.enqueue import INSERT_CHUNK
from workerpool.migrate import drift
from workerpool.process import settings
from workerpool.sql import db

#: enqueue_many sends half by COPY, and half (one of them keyed) as two pipelined chunks
JOBS = 2 * (INSERT_CHUNK + 50)


@pytest.fixture
def ledger(sql) -> None:
    sql(app.LEDGER)


def enqueue_through(bouncer: Bouncer, db_url: URL, count: int) -> list[int]:
    pool = WorkerPool(bouncer.url(db_url))
    pool.queue("work")
    pool.task(queue="work", name="touch")(app.touch)
    try:
        items: list[tuple] = [("touch", {"n": n}) for n in range(count)]
        half = count // 2
        items[half] = (*items[half], {"key": "through-the-bouncer"})
        return pool.enqueue_many(items[:half]) + pool.enqueue_many(items[half:])
    finally:
        pool.dispose()


def states(sql) -> dict[str, int]:
    return dict(
        sql("SELECT state, count(*) FROM workerpool_jobs WHERE task = 'touch' GROUP BY state")
    )


def server_backends(sql) -> int:
    """Client backends on the test database other than the test's own direct connection
    (autovacuum workers show up there too once the test's inserts trigger an analyze)."""
    return sql(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )[0][0]


def children_started(sup: Supervisor) -> dict[str, int]:
    started: dict[str, int] = {}
    for event in sup.events("child_started"):
        started[event.fields["worker"]] = started.get(event.fields["worker"], 0) + 1
    return started


def test_pgbouncer_mode_runs_every_job_and_cron_tick_once(
    through_bouncer, bouncer, db_url, sql, ledger, monkeypatch
):
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")  # the test's own enqueue engine, too
    sup = through_bouncer(pgbouncer_mode=True)
    sup.wait_running("work", "cron", "@maintenance")
    ids = enqueue_through(bouncer, db_url, JOBS)
    assert len(ids) == JOBS

    most = 0

    def all_done_and_three_cron_runs() -> bool:
        nonlocal most
        most = max(most, server_backends(sql))
        finished = sql(
            "SELECT count(*) FROM bouncer_ledger WHERE kind = 'cron' AND ended_at IS NOT NULL"
        )[0][0]
        return states(sql) == {"done": JOBS} and finished >= 3

    wait_until(
        all_done_and_three_cron_runs,
        40,
        interval=0.1,
        message=f"{JOBS} jobs done and three cron runs\n{sup.log()[-3000:]}",
    )

    # every job ran exactly once, through the bouncer, and nothing is left processing
    assert sql(
        "SELECT count(*), count(DISTINCT job_id) FROM bouncer_ledger WHERE kind = 'task'"
    ) == [(JOBS, JOBS)]
    assert sql(
        "SELECT count(*) FROM workerpool_jobs WHERE state = 'processing' AND task = 'touch'"
    ) == [(0,)]
    # all of it went over at most default_pool_size PostgreSQL connections
    assert 1 <= most <= POOL_SIZE, most
    # cron: each tick at most once, and no run started before the previous one ended
    runs = sql(
        "SELECT tick, started_at, ended_at FROM bouncer_ledger WHERE kind = 'cron'"
        " ORDER BY started_at"
    )
    ticks = [tick for tick, _, _ in runs]
    assert len(ticks) == len(set(ticks)), ticks
    for (_, _, ended), (_, started, _) in itertools.pairwise(runs):
        assert ended is not None and ended <= started, runs
    # the children are the first ones: no crash, no restart, no broken session state
    assert children_started(sup) == {"work": 1, "cron": 1, "@maintenance": 1}, sup.log()
    assert not sup.events("child_exited")
    assert all(alive(sup.child_pid(worker)) for worker in ("work", "cron", "@maintenance"))
    assert BROKEN not in sup.log() and "database_error" not in sup.log(), sup.log()[-3000:]


def test_a_cancel_reaches_a_running_job_without_notifications(
    through_bouncer, bouncer, db_url, sql, ledger, monkeypatch, tmp_path
):
    """Behind the bouncer there is no LISTEN: the worker reads its cancel requests back (every
    poll interval while it runs jobs, and at each lease renewal)."""
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")
    sup = through_bouncer(pgbouncer_mode=True)
    sup.wait_running("work")
    pool = WorkerPool(bouncer.url(db_url))
    pool.queue("work")
    pool.task(queue="work", name="waits")(app.waits)
    stamp = tmp_path / "seen"
    try:
        job_id = pool.enqueue("waits", {"stamp": str(stamp)})
        wait_until(
            lambda: (
                sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("processing",)]
            ),
            20,
            message=f"the job runs\n{sup.log()[-2000:]}",
        )
        asked = time.time()
        assert pool.cancel([job_id], reason="behind the bouncer").stopping == [job_id]
        wait_until(
            lambda: (
                sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("cancelled",)]
            ),
            20,
            message=f"cancelled\n{sup.log()[-2000:]}",
        )
        wait_until(stamp.exists, 5, message="the handler saw its cancel")
    finally:
        pool.dispose()
    latency = float(stamp.read_text()) - asked
    print(f"behind PgBouncer the cancel reached the handler in {latency * 1000:.0f} ms")
    assert latency < 10, latency  # the poll interval (0.2 s) on an idle machine
    assert BROKEN not in sup.log() and "database_error" not in sup.log(), sup.log()[-3000:]


def test_without_the_flag_transaction_pooling_breaks_prepared_statements(
    through_bouncer, bouncer, db_url, sql, ledger
):
    """psycopg prepares a statement after 5 runs on one client connection; the bouncer hands the
    next transaction another server connection: "prepared statement _pg3_0 does not exist" /
    "already exists" / "bind message supplies 5 parameters, but prepared statement requires 16"
    in the worker's own calls, the maintenance passes and the handlers' statements alike."""
    sup = through_bouncer(pgbouncer_mode=False)
    sup.wait_running("work", "cron", "@maintenance")
    enqueue_through(bouncer, db_url, JOBS)
    wait_until(
        lambda: BROKEN in sup.log(),
        30,
        interval=0.2,
        message=f"a prepared-statement error\n{sup.log()[-3000:]}",
    )
    assert "database_error" in sup.log()  # the worker's own transactions failed and were retried


def test_migrate_through_the_bouncer(bouncer, empty_db_url, tmp_path):
    """`workerpool migrate` (one transaction of distinct statements) works through the bouncer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_"))}
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": bouncer.url(empty_db_url).render_as_string(
                hide_password=False
            ),
            "PYTHONPATH": str(ROOT),
            settings.PGBOUNCER_ENV: "1",
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "workerpool", "migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    engine = db.create(empty_db_url)  # checked directly on PostgreSQL
    try:
        with engine.connect() as conn:
            assert drift(conn) == []
    finally:
        engine.dispose()
