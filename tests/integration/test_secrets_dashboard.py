"""The sentinel password never appears on a dashboard page: working pages, a job's page with its
traceback, a 404, and the error page of a dashboard whose database is unreachable."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from tests.apps import web
from tests.helpers.web import client, dead_jobs

SENTINEL = "S3cretSentinelPw"


def test_no_dashboard_page_shows_the_password(db_url):
    pool = web.build(db_url.set(password=SENTINEL))  # the test server trusts local logins
    try:
        ids = dead_jobs(pool, 2)
        with client(pool) as http:
            for path in (
                "/",
                "/jobs",
                f"/jobs/{ids[0]}",
                "/dead",
                "/jobs/999999999",
                "/jobs?state=nonsense",
            ):
                page = http.get(path)
                assert page.status_code < 500, (path, page.status_code)
                assert SENTINEL not in page.text, path
    finally:
        pool.dispose()


def test_the_error_page_of_an_unreachable_database_shows_no_password():
    pool = web.build(make_url(f"postgresql+psycopg://bob:{SENTINEL}@127.0.0.1:1/nowhere"))
    try:
        with client(pool) as http:
            for path in ("/", "/dead", "/jobs/1"):
                page = http.get(path)
                assert page.status_code >= 500, (path, page.status_code)
                assert SENTINEL not in page.text and SENTINEL not in str(page.headers), path
    finally:
        pool.dispose()


@pytest.mark.slow  # the CLI as a subprocess
def test_a_read_replica_down_is_named_with_its_secrets_masked(db_url, monkeypatch, tmp_path):
    """libpq takes a password in the query too (``?password=``, ``sslpassword=``): the 503
    page names the replica without either, and so does the command line's one line."""
    from tests.helpers.cli import run_cli

    replica = (
        f"postgresql://bob@127.0.0.1:1/nowhere?password={SENTINEL}"
        f"&sslpassword={SENTINEL}2&application_name=reader"
    )
    pool = web.build(db_url)
    monkeypatch.setenv("WORKERPOOL_READ_URL", replica)
    reading = web.build(db_url)
    try:
        with client(reading) as http:
            page = http.get("/")
        assert page.status_code == 503 and "the read replica" in page.text
        assert SENTINEL not in page.text and "application_name=reader" in page.text
        assert "password=***" in page.text and "sslpassword=***" in page.text
    finally:
        reading.dispose()
        pool.dispose()
    shown = run_cli("status", url=db_url, cwd=tmp_path, extra_env={"WORKERPOOL_READ_URL": replica})
    assert shown.returncode != 0 and "the read replica" in shown.stderr
    assert SENTINEL not in shown.stderr + shown.stdout
