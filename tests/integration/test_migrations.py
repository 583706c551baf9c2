"""Alembic: head equals the Table definitions; downgrade base → upgrade head round-trips; a
migration's data step."""

from __future__ import annotations

from sqlalchemy import inspect

from workerpool.migrate import alembic_config, downgrade, drift, upgrade
from workerpool.sql import db
from workerpool.sql.history import COLUMNS
from workerpool.sql.schema import metadata


def test_upgrade_head_matches_the_models_exactly(empty_db_url):
    upgrade(empty_db_url)
    engine = db.create(empty_db_url)
    with engine.connect() as conn:
        assert drift(conn) == []
        tables = set(inspect(conn).get_table_names())
    engine.dispose()
    assert tables == set(metadata.tables) | {"workerpool_alembic_version"}


def test_downgrade_base_then_upgrade_head_round_trips(empty_db_url):
    engine = db.create(empty_db_url)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE app_table (id int)")  # an application's own table
        conn.commit()
    upgrade(empty_db_url)
    downgrade(empty_db_url, "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == {"app_table", "workerpool_alembic_version"}
    upgrade(empty_db_url)
    with engine.connect() as conn:
        assert drift(conn) == []
        assert "app_table" in inspect(conn).get_table_names()
    engine.dispose()


def test_own_version_table_leaves_the_applications_alembic_alone(empty_db_url):
    engine = db.create(empty_db_url)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num varchar(32) primary key)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('app_rev_1')")
        conn.commit()
    upgrade(empty_db_url)
    with engine.connect() as conn:
        assert (
            conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == "app_rev_1"
        )
        assert (
            conn.exec_driver_sql("SELECT version_num FROM workerpool_alembic_version").scalar()
            == head_revision()
        )
    engine.dispose()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_the_finished_minutes_start_with_the_historys_last_hour(empty_db_url):
    upgrade(empty_db_url, "0015")
    engine = db.create(empty_db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE workerpool_jobs_history_p0 PARTITION OF workerpool_jobs_history"
            " FOR VALUES FROM (now() - interval '2 days') TO (now() + interval '1 day')"
        )
        conn.exec_driver_sql(  # 10 rows a minute ago, 2 two hours ago
            "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
            " SELECT 'q', 't', 'done', date_trunc('minute', now()) - make_interval(mins => m)"
            " FROM generate_series(1, 12) AS n,"
            " LATERAL (SELECT CASE WHEN n <= 10 THEN 1 ELSE 120 END) AS a(m)"
        )
        added_since = {"workflow_step"}  # 0019
        then = ", ".join(c for c in COLUMNS.split(", ") if c not in added_since)
        conn.exec_driver_sql(
            f"INSERT INTO workerpool_jobs_history ({then}) SELECT {then} FROM workerpool_jobs"
        )
    upgrade(empty_db_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(
            "SELECT queue, state, count FROM workerpool_finished_minutes"
        ).all() == [("q", "done", 10)]
        assert drift(conn) == []
    downgrade(empty_db_url, "0015")
    with engine.connect() as conn:
        assert "workerpool_finished_minutes" not in inspect(conn).get_table_names()
        assert "ix_workerpool_jobs_history_finished" in {
            ix["name"] for ix in inspect(conn).get_indexes("workerpool_jobs_history")
        }
    engine.dispose()
