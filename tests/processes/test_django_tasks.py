"""The Django Tasks backend passes the test project's own tests (tests/apps/django_project/
tests.py): Django's test runner, in a process of its own, on this test's database server; its
tests post to a view that enqueues in ``transaction.atomic()``, a real ``workerpool run``
runs the tasks, and the results are read back with ``get_result`` / ``refresh()``.

A process of its own: Django's settings are configured once per process, and the Django recipe's
test configures other ones in the pytest worker it runs in.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.helpers.paths import ROOT
from tests.helpers.recipes import recipe_env

SETTINGS = "tests.apps.django_project.settings"
#: Every test of the project's file: a run that skips or loses one must not pass here.
PROJECT_TESTS = 21


def run_project_tests(url: str, *labels: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", "test", *labels, "--noinput", "-v", "2"],
        env=recipe_env(url, DJANGO_SETTINGS_MODULE=SETTINGS),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow  # a real supervisor, and Django's runner makes two test databases
def test_the_django_project_s_own_tests_pass_on_a_real_worker(db_url):
    url = db_url.render_as_string(hide_password=False)
    # Two processes, each on its own clone of the test database (CI's Django 6 step runs
    # them in one): workerpool's runner must have migrated the database before Django cloned it.
    run = run_project_tests(url, "tests.apps.django_project.tests", "--parallel", "2")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert f"Ran {PROJECT_TESTS} tests" in output, output
    assert "\nOK\n" in output, output  # not "OK (skipped=N)"; the tasks' log lines interleave


def run_worker_target(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workerpool", "run", "workerpool.contrib.django.worker:pool"],
        env=recipe_env(url, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_the_worker_target_refuses_a_project_it_cannot_serve_in_one_line(db_url, sql):
    url = db_url.render_as_string(hide_password=False)
    jobs = sql("SELECT count(*) FROM workerpool_jobs")
    unset = run_worker_target(url)
    assert unset.returncode != 0
    assert unset.stderr.strip().count("\n") == 0, unset.stderr
    assert "DJANGO_SETTINGS_MODULE" in unset.stderr

    other = run_worker_target(url, DJANGO_SETTINGS_MODULE=f"{SETTINGS}_immediate")
    assert other.returncode != 0
    assert other.stderr.strip().count("\n") == 0, other.stderr
    assert "TASKS['default'] is ImmediateBackend, not workerpool.contrib.django" in other.stderr
    assert sql("SELECT count(*) FROM workerpool_jobs") == jobs


def run_migrate(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workerpool", "migrate", *args],
        env=recipe_env(url, DJANGO_SETTINGS_MODULE=SETTINGS, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def workerpool_tables(url) -> list[str]:
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'workerpool_%'")
        return sorted(name for (name,) in rows)


def test_migrate_with_the_django_target_migrates_django_s_database(db_url, empty_db_url):
    """$WORKERPOOL_DATABASE_URL names another database: --app's pool is the one Django's
    settings make."""
    url = db_url.render_as_string(hide_password=False)
    target = "workerpool.contrib.django.worker:pool"
    both = run_migrate(url, "--app", target, "--schema", "other", **project_db(empty_db_url))
    assert both.returncode != 0
    assert both.stderr.strip().count("\n") == 0, both.stderr
    assert "--app or --schema" in both.stderr
    assert workerpool_tables(empty_db_url) == []

    run = run_migrate(url, "--app", target, **project_db(empty_db_url))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "workerpool_jobs" in workerpool_tables(empty_db_url)


def project_db(url) -> dict[str, str]:
    return {"DJANGO_PROJECT_DB_NAME": str(url.database)}
