"""Real PostgreSQL for every test: a migrated template database, and a clean copy per test.

``WORKERPOOL_TEST_DATABASE_URL`` points at a server to use (CI: the local PostgreSQL 15);
without it the embedded PostgreSQL (pgserver) under ``.workerpool/test-pgdata`` is started.

Under pytest-xdist the controlling process migrates one template before it starts the workers
and names it to them in ``WORKERPOOL_TEST_TEMPLATE`` (six workers migrating a template each took
their first seconds on two cores); it drops the template at the end. Each worker keeps its own
copy of it. A run without xdist makes its template in the ``template_db`` fixture. The
controller starts the embedded server (pgserver serialises starts behind its own lock file, so
a worker that starts it too attaches to the same postmaster).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url

from tests.helpers import databases
from tests.helpers.db import libpq
from tests.helpers.metrics import metrics_recorder  # noqa: F401 (a fixture, for every tier)
from tests.helpers.paths import ROOT
from tests.helpers.pgbouncer import bouncer  # noqa: F401 (a fixture, for every tier)
from workerpool import WorkerPool
from workerpool.migrate import upgrade
from workerpool.process import settings
from workerpool.sql import db

TEST_URL_ENV = settings.TEST_URL_ENV
EMBEDDED_TEST_DIR = Path(
    os.environ.get(settings.EMBEDDED_DIR_ENV, ROOT / ".workerpool" / "test-pgdata")
).absolute()


def _server_url() -> URL:
    raw = os.environ.get(TEST_URL_ENV)
    if raw:
        return db.normalise(make_url(raw))
    os.environ.setdefault(settings.EMBEDDED_DIR_ENV, str(EMBEDDED_TEST_DIR))
    return db.embedded_url(settings.embedded_dir())


def pytest_sessionstart(session: pytest.Session) -> None:
    """The test run stops the embedded server at its end if it was not running at its start
    (under xdist: the controlling process decides). Under xdist the controller makes the
    workers' shared template here: this hook runs before xdist's, which starts the workers."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    if not os.environ.get(TEST_URL_ENV):
        config.stash[_STARTED_HERE] = not db.embedded_running(EMBEDDED_TEST_DIR)
    if config.getoption("numprocesses", None) and not config.getoption("collectonly"):
        template = databases.create(_server_url(), "wp_tpl")
        config.stash[_SHARED_TEMPLATE] = template
        upgrade(template)
        os.environ[TEMPLATE_ENV] = template.database


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After xdist's own (``trylast``): the workers have stopped using the template."""
    template = session.config.stash.get(_SHARED_TEMPLATE, None)
    if template is not None:
        databases.drop(_server_url(), template)
    if session.config.stash.get(_STARTED_HERE, False):
        db.stop_embedded(EMBEDDED_TEST_DIR)


_STARTED_HERE = pytest.StashKey[bool]()
_SHARED_TEMPLATE = pytest.StashKey[URL]()
#: The shared template's name, from the xdist controller to its workers.
TEMPLATE_ENV = "WORKERPOOL_TEST_TEMPLATE"

PROCESSES = Path(__file__).parent / "processes"

#: The quick tier's mark expression (the README's Development section).
QUICK = "not slow"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The quick tier does not import the files of ``tests/processes``: every test there is
    slow, so ``-m "not slow"`` would deselect them all after each xdist worker had paid for
    their imports (collecting the quick tier took 7.8 s of CPU instead of 12.5 to 13.8 s)."""
    if config.getoption("markexpr") == QUICK and PROCESSES in collection_path.parents:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of ``tests/processes`` is slow (real forks, supervisors, browsers, chaos,
    soaks, bench smokes, wheels); a slower test elsewhere says so with ``@pytest.mark.slow``.

    The slow ones are collected first, so a serial run reports the long tests early. Under
    xdist's ``--dist loadfile`` this order does not reach the workers: pytest-xdist hands the
    files out by their number of tests (docs/benchmarks.md, "The test suite's own time")."""
    for item in items:
        if item.path.is_relative_to(PROCESSES):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def server_url() -> URL:
    return _server_url()


@pytest.fixture(scope="session")
def template_db(server_url: URL) -> Iterator[str]:
    """The migrated template: the controller's under xdist, else one made for this run."""
    shared = os.environ.get(TEMPLATE_ENV)
    if shared:
        yield shared
        return
    with databases.scratch_database(server_url, "wp_tpl") as url:
        upgrade(url)
        yield url.database


@pytest.fixture(scope="session")
def _reused_copy(server_url: URL, template_db: str) -> Iterator[databases.ReusedCopy]:
    copy = databases.ReusedCopy(server_url, template_db)
    yield copy
    copy.close()


@pytest.fixture
def db_url(
    request: pytest.FixtureRequest,
    server_url: URL,
    template_db: str,
    _reused_copy: databases.ReusedCopy,
) -> Iterator[URL]:
    """A clean, migrated database for this test: the process's reused copy of the template,
    made clean again afterwards (tests/helpers/databases.py). A test of ``tests/processes`` gets
    a new copy of its own, dropped WITH (FORCE) afterwards: a child it started may outlive the
    test by a moment, and must find no database rather than the next test's."""
    if request.node.path.is_relative_to(PROCESSES):
        with databases.scratch_database(server_url, "wp_t", template_db) as url:
            yield url
        return
    url = _reused_copy.take()
    try:
        yield url
    finally:
        _reused_copy.give_back()


@pytest.fixture
def empty_db_url(server_url: URL) -> Iterator[URL]:
    """A fresh database with no tables (for migration tests)."""
    with databases.scratch_database(server_url, "wp_e") as url:
        yield url


@pytest.fixture
def pool(db_url: URL) -> Iterator[WorkerPool]:
    pool = WorkerPool(db_url)
    yield pool
    pool.dispose()


@pytest.fixture
def app_pool(db_url: URL) -> Iterator[WorkerPool]:
    """The dashboard tests' application (tests/apps/web.py) on this test's database."""
    from tests.apps import web  # imported here: only the dashboard's tests need Starlette

    pool = web.build(db_url)
    yield pool
    pool.dispose()


@pytest.fixture
def http(app_pool: WorkerPool) -> Iterator[Any]:
    """Starlette's test client on ``workerpool.web.app(app_pool)``."""
    from tests.helpers.web import client

    with client(app_pool) as test_client:
        yield test_client


@pytest.fixture
def dsn(db_url: URL) -> str:
    """libpq connection string for raw psycopg connections in tests."""
    return libpq(db_url)


@pytest.fixture
def sql(dsn: str) -> Iterator[Callable[..., list[tuple]]]:
    """Run one statement on an autocommit connection and return its rows."""
    conn = psycopg.connect(dsn, autocommit=True)

    def run(statement: str, *params: object) -> list[tuple]:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []

    yield run
    conn.close()
