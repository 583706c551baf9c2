"""The pytest plugin (entry point ``pytest11``): a ``workerpool_pool`` on a throwaway database.

The server is ``$WORKERPOOL_TEST_DATABASE_URL``, else ``$WORKERPOOL_DATABASE_URL``, else the
embedded PostgreSQL. A template database is created and migrated once per session (a random
name), each test gets a copy of it (``CREATE DATABASE ... TEMPLATE``, much faster than
migrating), and every database is dropped afterwards. With ``workerpool_app = "module:pool"``
in the ini options the fixture is that pool, pointed at the test's database while the test
runs; otherwise a new, empty ``WorkerPool``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import URL, make_url

from ..client import Engines, WorkerPool
from ..process import settings
from ..sql import db

TEST_URL_ENV = settings.TEST_URL_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "workerpool_app",
        "APP:POOL whose pool the workerpool_pool fixture is "
        "(pointed at a throwaway database); unset: an empty WorkerPool",
        default="",
    )


def server_url() -> URL:
    """Where throwaway databases are made: the test URL, the app's URL, or the embedded one."""
    raw = settings.test_database_url() or settings.database_url()
    return db.normalise(make_url(raw)) if raw else db.embedded_url(settings.embedded_dir())


def _admin_execute(server: URL, statement: str) -> None:
    import psycopg

    dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(statement)  # type: ignore[arg-type]


@contextmanager
def throwaway_database(server: URL, template: str | None = None) -> Iterator[URL]:
    """A randomly named database on ``server`` (a copy of ``template``), dropped on exit."""
    name = f"workerpool_test_{secrets.token_hex(6)}"
    _admin_execute(
        server, f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    )
    try:
        yield server.set(database=name)
    finally:
        _admin_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _workerpool_template() -> Iterator[tuple[URL, str]]:
    from ..migrate import upgrade

    server = server_url()
    with throwaway_database(server) as url:
        upgrade(url)
        yield server, str(url.database)


@pytest.fixture
def workerpool_database_url(_workerpool_template: tuple[URL, str]) -> Iterator[URL]:
    """A fresh database with workerpool's tables, for this test only."""
    server, template = _workerpool_template
    with throwaway_database(server, template) as url:
        yield url


@pytest.fixture
def workerpool_pool(
    request: pytest.FixtureRequest, workerpool_database_url: URL
) -> Iterator[WorkerPool]:
    """The application's pool (``workerpool_app``) or an empty one, on this test's database."""
    target = request.config.getini("workerpool_app")
    if not target:
        pool = WorkerPool(workerpool_database_url)
        yield pool
        pool.dispose()
        return
    from ..cli.target import load_pool

    pool = load_pool(target)
    saved = pool.engines, pool._enqueued
    pool.engines = Engines(workerpool_database_url)
    try:
        yield pool
    finally:
        pool.dispose()
        pool.engines, pool._enqueued = saved
