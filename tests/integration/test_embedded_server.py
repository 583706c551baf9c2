"""The embedded PostgreSQL is stopped by the command that started it, and only by that one: a
server the user already had running is left running."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from workerpool.process import settings
from workerpool.sql import db

pytestmark = pytest.mark.slow  # subprocesses: Python starts, servers, migrations


@pytest.fixture
def own_embedded_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.URL_ENV, raising=False)
    monkeypatch.setenv(settings.EMBEDDED_DIR_ENV, str(tmp_path / "pgdata"))
    yield tmp_path / "pgdata"
    db.stop_embedded(tmp_path / "pgdata")


def test_a_command_that_starts_the_server_stops_it_at_its_end(own_embedded_dir):
    with db.embedded_for_this_command(None, own_embedded_dir):
        db.embedded_url(own_embedded_dir)
        assert db.embedded_running(own_embedded_dir)
    assert not db.embedded_running(own_embedded_dir)


def test_a_server_that_was_already_running_is_left_running(own_embedded_dir):
    db.embedded_url(own_embedded_dir)
    with db.embedded_for_this_command(None, own_embedded_dir):
        db.embedded_url(own_embedded_dir)
    assert db.embedded_running(own_embedded_dir)
    assert db.stop_embedded(own_embedded_dir)
    assert not db.embedded_running(own_embedded_dir)
    assert not db.stop_embedded(own_embedded_dir)  # nothing to stop


def test_the_test_command_stops_the_embedded_server_it_started(own_embedded_dir):
    """The README's test command on a fresh machine (no test URL): the suite starts the embedded
    server, and stops it when it ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env[settings.EMBEDDED_DIR_ENV] = str(own_embedded_dir)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "tests/integration/test_claim.py::test_claim_counts_the_attempt_and_takes_the_lease",
            "tests/integration/test_claim.py::test_claim_never_returns_more_rows_than_asked",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (own_embedded_dir / "PG_VERSION").exists(), "the run used the embedded server"
    assert not db.embedded_running(own_embedded_dir)


def test_workerpool_embedded_status_and_stop(own_embedded_dir):
    def cli(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
        env[settings.EMBEDDED_DIR_ENV] = str(own_embedded_dir)
        return subprocess.run(
            [sys.executable, "-m", "workerpool", "embedded", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    db.embedded_url(own_embedded_dir)
    assert cli("status").returncode == 0
    stopped = cli("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert not db.embedded_running(own_embedded_dir)
    assert cli("status").returncode == 1
    assert "no embedded PostgreSQL is running" in cli("stop").stdout
    refused = cli("restart")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
