"""`workerpool demo --database NAME` drops only a database it created itself (real PostgreSQL).

The demo re-creates its database on each run. A database someone else made, under any name, is
refused with one line and left exactly as it was, sessions included.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.helpers.db import libpq
from tests.helpers.paths import ROOT
from workerpool.model.errors import ConfigError
from workerpool_demo.database import DEMO_MARK, fresh_database


@pytest.fixture
def names(server_url: URL) -> Iterator[list[str]]:
    """Random database names for this test; every one is dropped afterwards."""
    made: list[str] = []
    yield made
    with psycopg.connect(libpq(server_url), autocommit=True) as admin:
        for name in made:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def someone_elses(server_url: URL, names: list[str]) -> str:
    """A database made outside the demo, holding one row of application data."""
    name = f"wp_app_{secrets.token_hex(5)}"
    names.append(name)
    with psycopg.connect(libpq(server_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(libpq(server_url.set(database=name))) as conn:
        conn.execute("CREATE TABLE customers (name text)")
        conn.execute("INSERT INTO customers VALUES ('ada')")
    return name


def customers(server_url: URL, name: str) -> list[tuple]:
    with psycopg.connect(libpq(server_url.set(database=name))) as conn:
        return conn.execute("SELECT name FROM customers").fetchall()


def test_an_unmarked_database_is_refused_and_survives(server_url, someone_elses, monkeypatch):
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", libpq(server_url))
    with psycopg.connect(libpq(server_url.set(database=someone_elses))) as session:
        with pytest.raises(ConfigError, match="was not created by workerpool demo"):
            fresh_database(someone_elses)
        assert session.execute("SELECT 1").fetchone() == (1,)  # its session was not killed
    assert customers(server_url, someone_elses) == [("ada",)]


def test_the_demo_recreates_only_the_database_it_marked(server_url, names, monkeypatch):
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", libpq(server_url))
    name = f"wp_demo_{secrets.token_hex(5)}"
    names.append(name)
    url = fresh_database(name)
    with psycopg.connect(libpq(url)) as conn:
        comment = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
            "WHERE datname = current_database()"
        ).fetchone()
        conn.execute("CREATE TABLE leftover (x int)")
    assert comment == (DEMO_MARK,)
    fresh_database(name)  # its own database: dropped and re-created, mark and all
    with psycopg.connect(libpq(url)) as conn:
        assert conn.execute("SELECT to_regclass('leftover')").fetchone() == (None,)


@pytest.mark.slow  # the CLI as a subprocess
def test_the_cli_refuses_with_one_line_and_a_failure_status(server_url, someone_elses):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(WORKERPOOL_DATABASE_URL=libpq(server_url), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "workerpool", "demo", "--database", someone_elses],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to drop it" in lines[0], done.stderr
    assert someone_elses in lines[0]
    assert customers(server_url, someone_elses) == [("ada",)]
