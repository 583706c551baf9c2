"""The maintenance child keeps the jobs table healthy: it reads the table's counters and the
xmin horizon's holder, runs ANALYZE or VACUUM when autovacuum is behind, and says once what it
cannot do under a role that does not own the table. Real PostgreSQL, real roles."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.model.job import new_worker_id
from workerpool.ops import status
from workerpool.runtime.maintenance import Maintenance
from workerpool.runtime.maintenance import health as health_module
from workerpool.runtime.maintenance.health import TableKeeper, overdue, read
from workerpool.sql import table_health

ROWS = 20_000  # above VACUUM_MIN_DEAD and ANALYZE_MIN_CHANGES


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def quiet_table(sql):
    """Autovacuum off for the table whatever the server does: the duty is the only actor."""
    sql("ALTER TABLE workerpool_jobs SET (autovacuum_enabled = off)")
    sql("ANALYZE workerpool_jobs")  # statistics of an empty table, as after a migration
    return sql


def counters(pool: WorkerPool):
    with pool.engine.connect() as conn:
        return table_health.table_stats(conn)


def settle_counters(pool: WorkerPool, predicate):
    """Statistics counters reach the views shortly after a transaction ends."""
    seen = []

    def matches() -> bool:
        seen[:] = [counters(pool)]
        return predicate(seen[0])

    wait_until(matches, timeout=15, message="table counters")
    return seen[0]


@pytest.mark.slow
def test_analyze_runs_when_the_statistics_are_behind(pool, quiet_table):
    quiet_table(
        f"INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, {ROWS})"
    )
    settle_counters(pool, lambda row: row.modified >= ROWS)
    keeper = TableKeeper(pool.engine)
    assert keeper.check() == table_health.ANALYZE
    keeper.wait(60)
    row = settle_counters(pool, lambda row: row.analyze_age is not None and row.modified == 0)
    assert row.estimated_rows == ROWS
    assert quiet_table(
        "SELECT count(*) FROM pg_stats WHERE tablename = 'workerpool_jobs' AND attname = 'run_at'"
    ) == [(1,)]
    assert keeper.check() is None  # nothing is overdue any more
    keeper.close()


@pytest.mark.slow
def test_vacuum_with_analyze_runs_when_dead_rows_pile_up(pool, quiet_table):
    quiet_table(
        f"INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, {ROWS})"
    )
    quiet_table("DELETE FROM workerpool_jobs")
    settle_counters(pool, lambda row: row.dead >= ROWS)
    keeper = TableKeeper(pool.engine)
    assert keeper.check() == table_health.VACUUM
    keeper.wait(60)
    row = settle_counters(pool, lambda row: row.vacuum_age is not None and row.dead == 0)
    assert row.analyze_age is not None  # never a bare VACUUM (it is what turns plans bad)
    keeper.close()


def test_health_is_read_at_a_bounded_cadence_from_the_maintenance_pass(pool, monkeypatch):
    now = [1000.0]
    maintenance = Maintenance(pool.registry, pool.engine, worker_id=new_worker_id())
    maintenance.table = TableKeeper(pool.engine, clock=lambda: now[0])
    reads = []
    monkeypatch.setattr(
        health_module, "read", lambda conn, real=health_module.read: reads.append(1) or real(conn)
    )
    maintenance.run_pass()
    maintenance.run_pass()
    assert len(reads) == 1
    now[0] += health_module.HEALTH_INTERVAL
    maintenance.run_pass()
    assert len(reads) == 2
    maintenance.close()


def test_overdue_is_relative_to_the_table_and_waits_between_vacuums():
    def health(**fields):
        base = {
            "live": 1_000_000,
            "dead": 0,
            "modified": 0,
            "estimated_rows": 1_000_000,
            "table_bytes": 0,
            "index_bytes": 0,
            "vacuum_age_s": None,
            "autovacuum_age_s": None,
            "analyze_age_s": None,
            "autoanalyze_age_s": None,
            "holder": None,
        }
        return health_module.TableHealth(**(base | fields))

    assert overdue(health(dead=50_000, modified=50_000)) is None  # 5 % of a 1M-row table
    assert overdue(health(modified=150_000)) == table_health.ANALYZE
    assert overdue(health(dead=150_000)) == table_health.VACUUM
    assert overdue(health(dead=150_000, autovacuum_age_s=10.0)) is None  # just vacuumed
    assert overdue(health(modified=150_000, autoanalyze_age_s=10.0)) is None  # just analyzed
    assert overdue(health(modified=150_000, analyze_age_s=90.0)) == table_health.ANALYZE
    # ... unless the planner's count is far off (a load right after a migration)
    assert (
        overdue(health(modified=150_000, estimated_rows=0, analyze_age_s=1.0))
        == table_health.ANALYZE
    )
    assert overdue(health(live=0, estimated_rows=-1, dead=ROWS)) == table_health.VACUUM


@pytest.fixture
def dml_role(db_url: URL, sql) -> Iterator[URL]:
    """A login role that may read and write the tables but owns nothing (least privilege)."""
    role = f"wp_dml_{secrets.token_hex(4)}"
    sql(f'CREATE ROLE "{role}" LOGIN')
    sql(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
    sql(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
    yield db_url.set(username=role, password=None)
    sql(f'DROP OWNED BY "{role}"')
    sql(f'DROP ROLE "{role}"')


@pytest.mark.slow
def test_a_role_that_does_not_own_the_table_says_once_what_it_cannot_do(
    dml_role, quiet_table, caplog
):
    quiet_table(
        f"INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, {ROWS})"
    )
    pool = WorkerPool(dml_role)
    try:
        settle_counters(pool, lambda row: row.modified >= ROWS)
        keeper = TableKeeper(pool.engine)
        with caplog.at_level(logging.WARNING, logger="workerpool.maintenance"):
            assert keeper.check() is None
            assert keeper.check() is None
        denied = [r for r in caplog.records if getattr(r, "event", "") == "table_health_denied"]
        assert len(denied) == 1, caplog.text
        message = denied[0].getMessage()
        assert "ANALYZE" in message and "neither the owner of workerpool_jobs" in message
        assert dml_role.username in message
        assert counters(pool).modified >= ROWS  # nothing was run
        keeper.close()
    finally:
        pool.dispose()


def test_the_horizon_holder_is_named_and_shown_by_status(pool, db_url):
    holder = psycopg.connect(_libpq(db_url), application_name="report-export")
    try:
        holder.execute("SELECT txid_current()")  # an open transaction with an xid
        pid = holder.info.backend_pid
        with pool.engine.connect() as conn:
            found = read(conn).holder
        assert found is not None
        assert (found.kind, found.name, found.application) == ("session", str(pid), "report-export")
        assert found.state == "idle in transaction" and found.age_s >= 0
        report = status.collect(pool.engine)
        assert report["table_health"]["holder"]["name"] == str(pid)
        text = status.render(report)
        assert f"xmin horizon: held by session {pid} (report-export" in text
        # The rollback returns once the backend has given up its xid; a close would return
        # before the backend is gone from pg_stat_activity.
        holder.rollback()
        with pool.engine.connect() as conn:
            assert read(conn).holder is None
    finally:
        holder.close()
