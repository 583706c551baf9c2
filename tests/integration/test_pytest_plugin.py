"""The pytest plugin, as a user's suite sees it: a user's test file run by pytester in a
subprocess, with the plugin found through its entry point."""

from __future__ import annotations

import psycopg
import pytest

from workerpool.testing.plugin import server_url

pytestmark = pytest.mark.slow  # a user's suite in a pytest of its own

pytest_plugins = ["pytester"]

USER_APP = """
from workerpool import WorkerPool

pool = WorkerPool()

@pool.task(queue="email")
def send_welcome(job):
    if job.payload.get("fail"):
        raise RuntimeError("smtp down")
"""

USER_TESTS = """
import os
from workerpool import WorkerPool, testing
import myjobs

def _note(pool):
    with open(os.environ["NOTE_FILE"], "a") as note:
        note.write(pool.url.database + "\\n")

def test_enqueue_and_drain(workerpool_pool):
    assert workerpool_pool is myjobs.pool
    _note(workerpool_pool)
    workerpool_pool.enqueue("send_welcome", {"email": "ada@example.com"})
    testing.assert_enqueued(workerpool_pool, "send_welcome", payload={"email": "ada@example.com"})
    assert [r.state for r in testing.drain(workerpool_pool)] == ["done"]

def test_each_test_has_a_fresh_database(workerpool_pool):
    _note(workerpool_pool)
    testing.assert_not_enqueued(workerpool_pool, state=testing.ANY)
    workerpool_pool.enqueue("send_welcome", {"fail": True})
    assert [r.state for r in testing.drain(workerpool_pool)] == ["failed"]

def test_a_failing_assertion_fails_the_users_test(workerpool_pool):
    testing.assert_enqueued(workerpool_pool, "send_welcome")
"""


def test_a_users_suite_gets_a_migrated_throwaway_database_per_test(pytester, tmp_path, monkeypatch):
    pytester.makepyfile(myjobs=USER_APP, test_user=USER_TESTS)
    pytester.makeini("[pytest]\nworkerpool_app = myjobs:pool\n")
    note = tmp_path / "databases.txt"
    monkeypatch.setenv("NOTE_FILE", str(note))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*expected a job of task 'send_welcome'*found 0*"])
    names = note.read_text().split()
    assert len(set(names)) == 2 and all(n.startswith("workerpool_test_") for n in names)
    server = server_url().set(drivername="postgresql")
    with psycopg.connect(server.render_as_string(hide_password=False)) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)
        ).fetchall()
    assert left == []  # dropped after each test


def test_without_an_app_the_fixture_is_an_empty_pool(pytester):
    pytester.makepyfile(
        test_empty="""
from workerpool import WorkerPool
from sqlalchemy import text

def test_empty(workerpool_pool, workerpool_database_url):
    assert isinstance(workerpool_pool, WorkerPool) and workerpool_pool.tasks == {}
    assert workerpool_pool.url == workerpool_database_url
    with workerpool_pool.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM workerpool_jobs")).scalar() == 0
"""
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
