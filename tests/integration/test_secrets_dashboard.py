"""The sentinel password never appears on a dashboard page: working pages, a job's page with its
traceback, a 404, and the error page of a dashboard whose database is unreachable."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from tests.apps import web
from tests.helpers.web import client, dead_jobs

SENTINEL = "S3cretSentinelPw"


def test_no_dashboard_page_shows_the_password(db_url):
    pool = web.build(db_url.set(password=SENTINEL))  # the test server trusts local logins
    try:
        ids = dead_jobs(pool, 2)
        with client(pool) as http:
            for path in ("/", "/jobs", f"/jobs/{ids[0]}", "/dead", "/jobs/999999999",
                         "/jobs?state=nonsense"):
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
