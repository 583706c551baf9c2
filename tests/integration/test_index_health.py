"""The maintenance child rebuilds a bloated index of the jobs table: after a backlog drains, the
due index keeps the pages the backlog grew it to (VACUUM does not shrink a B-tree). It is rebuilt
with REINDEX CONCURRENTLY, never in the busy hours, and a leftover of an interrupted rebuild is
dropped first. Real PostgreSQL."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from tests.helpers.waiting import wait_until
from workerpool import ConfigError
from workerpool.model.specs import MaintenanceSpec
from workerpool.runtime.maintenance import health
from workerpool.runtime.maintenance.health import TableKeeper, overdue, read_now
from workerpool.sql import table_health

DUE = "ix_workerpool_jobs_due"
SMALL = MaintenanceSpec(reindex_min_bytes=0)  # the test's table is small


def drain_backlog(pool, sql, jobs: int):
    """A backlog of ``jobs`` jobs that ran, and a few due ones: the due index keeps its pages."""
    sql("ALTER TABLE workerpool_jobs SET (autovacuum_enabled = off)")
    sql(
        "INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, %s)",
        jobs,
    )
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now()")
    sql("INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 100)")

    def vacuumed() -> bool:  # again while a snapshot holds the dead rows, or the views lag
        sql("VACUUM ANALYZE workerpool_jobs")
        return overdue(read_now(pool.engine)) is None

    wait_until(vacuumed, timeout=60, message="the table vacuumed and analyzed")
    return pool


@pytest.fixture
def drained_backlog(pool, sql):
    return drain_backlog(pool, sql, 50_000)


def due_index(pool) -> table_health.IndexSize:
    with pool.engine.connect() as conn:
        return next(index for index in table_health.index_sizes(conn) if index.name == DUE)


def valid_indexes(pool) -> list[table_health.IndexSize]:
    with pool.engine.connect() as conn:
        return [index for index in table_health.index_sizes(conn) if index.valid]


@pytest.mark.slow  # big data: 50,000 jobs run, then vacuumed
def test_a_bloated_index_is_rebuilt_concurrently(drained_backlog, caplog):
    pool = drained_backlog
    before = due_index(pool)
    assert before.bloat >= 10  # the backlog's pages, a hundred entries left in them
    keeper = TableKeeper(pool.engine, settings=SMALL)
    with caplog.at_level(logging.INFO, logger="workerpool.maintenance"):
        assert keeper.check() == f'REINDEX INDEX CONCURRENTLY "{DUE}"'
        keeper.wait(60)
    after = due_index(pool)
    assert after.valid and after.bytes < before.bytes / 10 and after.bloat < 2
    assert {"index_bloated", "index_rebuilt"} <= {getattr(r, "event", "") for r in caplog.records}
    assert keeper.check() is None  # nothing left to rebuild
    keeper.close()


@pytest.mark.slow  # big data: 50,000 jobs run, then vacuumed
def test_a_rebuild_takes_its_turn_before_a_due_analyze(drained_backlog, monkeypatch):
    # a busy queue passes the ANALYZE threshold between any two reads
    monkeypatch.setattr(health, "ANALYZE_MIN_GAP", 0.0)
    pool = drained_backlog
    with pool.engine.begin() as conn:  # rows the due index does not hold: its bloat stays
        conn.execute(
            text(
                "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
                " SELECT 'q', 't', 'done', now() FROM generate_series(1, 20000)"
            )
        )
    wait_until(
        lambda: overdue(read_now(pool.engine)) == table_health.ANALYZE,
        timeout=30,
        message="the statistics views show the inserts",
    )
    keeper = TableKeeper(pool.engine, settings=SMALL)
    assert keeper.check() == f'REINDEX INDEX CONCURRENTLY "{DUE}"'
    keeper.wait(60)
    assert keeper.check() == table_health.ANALYZE  # once nothing is bloated
    keeper.wait(60)
    keeper.close()


@pytest.mark.slow  # big data: 50,000 jobs run, then vacuumed
def test_no_rebuild_starts_in_the_busy_hours(drained_backlog):
    noon = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    busy = MaintenanceSpec(reindex_min_bytes=0, busy_hours=("08:00", "20:00"))
    keeper = TableKeeper(drained_backlog.engine, settings=busy, utc_now=lambda: noon)
    assert keeper.check() is None
    late = MaintenanceSpec(reindex_min_bytes=0, busy_hours=("20:00", "08:00"))  # wraps midnight
    keeper = TableKeeper(drained_backlog.engine, settings=late, utc_now=lambda: noon)
    assert keeper.check() == f'REINDEX INDEX CONCURRENTLY "{DUE}"'
    keeper.wait(60)
    keeper.close()


@pytest.mark.slow  # big data: 50,000 jobs run, then vacuumed
def test_an_index_below_the_thresholds_is_left_alone(drained_backlog):
    keeper = TableKeeper(drained_backlog.engine)  # the default: at least 8 MiB
    assert due_index(drained_backlog).bytes < MaintenanceSpec().reindex_min_bytes
    assert keeper.check() is None


@pytest.mark.slow  # big data: 99,000 rows
def test_on_a_small_hot_table_the_size_floor_counts_its_indexes_together(pool, sql):
    """No single index reaches the floor (8 MiB), but together they pass it: the due index, far
    above its packed size, is rebuilt, and not again within REBUILD_GAP."""
    drain_backlog(pool, sql, 100_000)
    indexes = valid_indexes(pool)
    floor = MaintenanceSpec().reindex_min_bytes
    assert max(index.bytes for index in indexes) < floor <= sum(i.bytes for i in indexes)
    keeper = TableKeeper(pool.engine)  # the default floor
    assert keeper.check() == f'REINDEX INDEX CONCURRENTLY "{DUE}"'
    keeper.wait(60)
    assert due_index(pool).bloat < 2
    sql("INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 99000)")
    sql(
        "DELETE FROM workerpool_jobs WHERE id > (SELECT min(id) + 100 FROM workerpool_jobs"
        " WHERE state = 'pending')"
    )
    sql("VACUUM workerpool_jobs")
    assert due_index(pool).bloat >= MaintenanceSpec().reindex_bloat  # bloated again, at once
    assert keeper.check() != f'REINDEX INDEX CONCURRENTLY "{DUE}"'
    keeper.wait(60)
    keeper.close()


def test_a_leftover_of_an_interrupted_rebuild_is_dropped_first(pool, sql):
    # what REINDEX CONCURRENTLY leaves when it is cancelled: an invalid index named *_ccnew
    sql(f"CREATE INDEX {DUE}_ccnew ON workerpool_jobs (queue)")
    sql(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{DUE}_ccnew'::regclass")
    keeper = TableKeeper(pool.engine, settings=SMALL)
    assert keeper.check() == f'DROP INDEX CONCURRENTLY IF EXISTS "{DUE}_ccnew"'
    keeper.wait(60)
    assert sql("SELECT count(*) FROM pg_class WHERE relname = %s", f"{DUE}_ccnew") == [(0,)]
    keeper.close()


@pytest.mark.parametrize(
    "settings",
    [
        {"busy_hours": ("8am", "8pm")},
        {"busy_hours": ("08:00",)},
        {"busy_hours": "08:00-20:00"},
        {"busy_hours": ("08:00", "08:00")},
        {"reindex_bloat": 1},
        {"reindex_min_bytes": -1},
    ],
)
def test_bad_settings_are_refused_by_name(pool, settings):
    with pytest.raises(ConfigError, match=r"maintenance: (busy_hours|reindex_)"):
        pool.maintenance(**settings)
