"""A database without workerpool's tables, or with older ones: every entry point says so in
one line naming `workerpool migrate` (and the revisions) instead of the driver's
UndefinedTable, and `workerpool run` refuses to start."""

from __future__ import annotations

import asyncio

import pytest

from tests.apps import basic
from tests.helpers.cli import run_cli
from workerpool import WorkerPool, migrate, testing
from workerpool.model.errors import NotMigrated

HEAD = migrate.head()
OLDER = "0012"
NO_TABLES = "the database has no workerpool tables in schema 'public': run `workerpool migrate`"


@pytest.fixture
def older_db_url(empty_db_url):
    migrate.upgrade(empty_db_url, OLDER)
    return empty_db_url


def one_line(done) -> str:
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "workerpool migrate" in lines[0] and "Traceback" not in done.stderr
    return lines[0]


def test_enqueue_and_the_testing_helpers_name_the_migration(empty_db_url):
    pool = basic.build(empty_db_url)
    try:
        with pytest.raises(NotMigrated, match=f"^{NO_TABLES.replace('(', '.')}") as raised:
            pool.enqueue("quick", {})
        assert f"(revision {HEAD})" in str(raised.value)
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            pool.enqueue_many([("quick", {})])
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            pool.chain([("quick", {}), ("quick", {})])
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            testing.drain(pool)
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            testing.assert_enqueued(pool, "quick")
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            pool.check_migrated()
    finally:
        pool.dispose()


def test_enqueue_async_names_the_migration(empty_db_url):
    pool = basic.build(empty_db_url)

    async def main() -> None:
        try:
            with pytest.raises(NotMigrated, match="workerpool migrate"):
                await pool.enqueue_async("quick", {})
        finally:
            await pool.dispose_async()

    asyncio.run(main())


def test_an_older_revision_is_named_with_both_revisions(older_db_url):
    pool = WorkerPool(older_db_url)
    try:
        with pytest.raises(NotMigrated) as raised:
            pool.check_migrated()
        assert str(raised.value) == (
            f"the database's workerpool tables in schema 'public' are at revision {OLDER}, "
            f"this code needs {HEAD}: run `workerpool migrate`"
        )
    finally:
        pool.dispose()


def test_a_migrated_database_passes(db_url):
    pool = WorkerPool(db_url)
    try:
        pool.check_migrated()
    finally:
        pool.dispose()


def test_the_commands_say_migrate_in_one_line(empty_db_url, tmp_path):
    status = one_line(run_cli("status", url=empty_db_url, cwd=tmp_path))
    assert NO_TABLES in status and "ProgrammingError" not in status
    enqueue = one_line(
        run_cli("enqueue", "tests.apps.basic:pool", "quick", url=empty_db_url, cwd=tmp_path)
    )
    assert NO_TABLES in enqueue
    web = one_line(run_cli("web", "--port", "1", url=empty_db_url, cwd=tmp_path))
    assert web.startswith("workerpool web: ") and NO_TABLES in web


def test_run_refuses_to_start_on_a_database_never_migrated(empty_db_url, tmp_path):
    done = run_cli(
        "run",
        "tests.apps.basic:pool",
        "--heartbeat-dir",
        str(tmp_path / "hb"),
        url=empty_db_url,
        cwd=tmp_path,
    )
    line = one_line(done)
    assert line == f"workerpool run: {NO_TABLES} (revision {HEAD})"
    assert "supervisor started" not in done.stderr


def test_run_refuses_an_older_revision(older_db_url, tmp_path):
    line = one_line(
        run_cli(
            "run",
            "tests.apps.basic:pool",
            "--heartbeat-dir",
            str(tmp_path / "hb"),
            url=older_db_url,
            cwd=tmp_path,
        )
    )
    assert f"at revision {OLDER}, this code needs {HEAD}" in line


def test_the_dashboard_mounted_on_a_database_never_migrated_says_so(empty_db_url):
    from tests.helpers.web import client

    pool = WorkerPool(empty_db_url)
    try:
        with client(pool) as http:
            page = http.get("/")
        assert page.status_code == 503
        assert "workerpool migrate" in page.text and "no workerpool tables" in page.text
    finally:
        pool.dispose()
