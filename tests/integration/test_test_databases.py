"""The reused test database (tests/helpers/databases.py): what a test leaves behind is gone for
the next test, and what the reset cannot undo makes a new copy."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.helpers import databases
from tests.helpers.db import libpq
from workerpool import WorkerPool


@pytest.fixture
def copy(server_url, template_db) -> Iterator[databases.ReusedCopy]:
    reused = databases.ReusedCopy(server_url, template_db)
    yield reused
    reused.close()


def run(url, *statements: str) -> list[tuple]:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        rows: list[tuple] = []
        for statement in statements:
            cur = conn.execute(statement)
            rows = cur.fetchall() if cur.description else []
        return rows


def test_rows_sequences_partitions_and_sessions_are_gone_for_the_next_test(copy):
    url = copy.take()
    first = enqueue(url)
    run(url, "SELECT workerpool_history_create_partition('2026-01-01', '2026-01-02')")
    left_open = psycopg.connect(libpq(url), autocommit=True)  # a session the test forgot
    left_open.execute("BEGIN; LOCK workerpool_jobs")
    copy.give_back()

    assert copy.take() == url  # the same database, clean again
    assert run(url, "SELECT count(*) FROM workerpool_jobs") == [(0,)]
    assert run(url, "SELECT count(*) FROM pg_inherits") == [(0,)]
    assert enqueue(url) == first  # the sequence starts again
    assert left_open.closed or left_open.broken or _dead(left_open)


def enqueue(url) -> int:
    pool = WorkerPool(url)
    pool.task(name="anything")(lambda job: None)
    try:
        return pool.enqueue("anything", {})
    finally:
        pool.dispose()


def _dead(conn: psycopg.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE ledger (id int)",
        "ANALYZE workerpool_jobs",
        "ALTER TABLE workerpool_jobs SET (fillfactor = 50)",
        "UPDATE workerpool_alembic_version SET version_num = '0001'",
        "CREATE FUNCTION answer() RETURNS int LANGUAGE sql AS 'SELECT 42'",
    ],
)
def test_what_the_reset_cannot_undo_makes_a_new_copy(copy, change):
    url = copy.take()
    run(url, change)
    copy.give_back()
    assert copy.take() != url
