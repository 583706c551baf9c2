"""The jobs table's per-table autovacuum settings: set by migration, compared by the drift check."""

from __future__ import annotations

from workerpool.migrate import downgrade, drift, upgrade
from workerpool.sql import db
from workerpool.sql.schema import JOBS_AUTOVACUUM


def reloptions(engine) -> dict[str, str]:
    with engine.connect() as conn:
        options = conn.exec_driver_sql(
            "SELECT reloptions FROM pg_class WHERE relname = 'workerpool_jobs'"
        ).scalar()
    return dict(option.split("=", 1) for option in options or [])


def test_migration_sets_the_queue_settings_and_downgrade_resets_them(empty_db_url):
    engine = db.create(empty_db_url)
    try:
        upgrade(empty_db_url)
        assert reloptions(engine) == JOBS_AUTOVACUUM
        with engine.connect() as conn:
            assert drift(conn) == []
        downgrade(empty_db_url, "0003")
        assert reloptions(engine) == {}
        upgrade(empty_db_url)
        assert reloptions(engine) == JOBS_AUTOVACUUM
    finally:
        engine.dispose()


def test_drift_check_sees_a_changed_storage_parameter(db_url):
    engine = db.create(db_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "ALTER TABLE workerpool_jobs SET"
                " (autovacuum_vacuum_scale_factor = 0.2, fillfactor = 70)"
            )
        with engine.connect() as conn:
            assert drift(conn) == [
                (
                    "modify_storage",
                    "workerpool_jobs",
                    {"autovacuum_vacuum_scale_factor": ("0.02", "0.2"), "fillfactor": (None, "70")},
                )
            ]
    finally:
        engine.dispose()
