"""A real PgBouncer in transaction pooling mode in front of the test's database: the fixtures
``bouncer`` (its config from ``bench/bouncer.py``) and ``through_bouncer`` (a `workerpool run`
reaching the database through it).

CI (``CI`` set) must have pgbouncer installed (``.ci/run`` installs it): there a missing binary
fails the test. Locally it is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL

from bench import bouncer as bouncer_config
from tests.helpers.db import libpq
from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all
from tests.helpers.waiting import wait_until
from workerpool.process import settings

POOL_SIZE = 2
#: What a driver says when a prepared statement went to another server session.
BROKEN = "prepared statement"


@dataclass
class Bouncer:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def url(self, db_url: URL) -> URL:
        return bouncer_config.through_bouncer(db_url, self.port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found:
        return found
    reason = "pgbouncer is not installed (apt-get install pgbouncer)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run these tests (.ci/run installs it)")
    pytest.skip(reason)


def backend(server_url: URL) -> tuple[str, int]:
    """Where the bouncer reaches the test server: TCP, or the embedded server's socket."""
    return bouncer_config.server_address(server_url)


def accepts(bouncer: Bouncer, server_url: URL) -> bool:
    if bouncer.proc.poll() is not None:
        raise AssertionError(f"pgbouncer exited ({bouncer.proc.returncode})\n{bouncer.log()}")
    try:
        with psycopg.connect(libpq(bouncer.url(server_url)), connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.fixture
def bouncer(server_url: URL) -> Iterator[Bouncer]:
    """A pgbouncer in transaction mode on a free port in front of the test's database."""
    binary = pgbouncer_binary()
    server = backend(server_url)
    directory = Path(tempfile.mkdtemp(prefix="wp-pgbouncer-"))  # not tmp_path: 0700 parents
    newer = bouncer_config.newer(binary)
    as_user = bouncer_config.run_as(server)
    started: list[Bouncer] = []
    try:
        for tries_left in reversed(range(3)):
            port = bouncer_config.free_port()
            config = bouncer_config.write_config(
                directory, port, server, newer=newer, pool_size=POOL_SIZE, max_clients=100
            )
            log_path = directory / f"pgbouncer-{port}.log"
            with log_path.open("wb") as log_file:
                proc = subprocess.Popen(
                    [binary, *as_user, str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,
                )
            running = Bouncer(proc, port, log_path)
            started.append(running)
            try:
                wait_until(
                    lambda: accepts(running, server_url),
                    10,
                    interval=0.1,
                    message="pgbouncer accepting connections",
                )
                break
            except AssertionError:
                # the free port was taken (by a test running in parallel) before pgbouncer
                # bound it: pick another one
                if not tries_left or "Address already in use" not in running.log():
                    raise
        yield running
    finally:
        for bouncer in started:
            bouncer.proc.kill()
            bouncer.proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def through_bouncer(db_url: URL, bouncer: Bouncer, tmp_path: Path) -> Iterator:
    """Start `workerpool run tests.apps.bouncer:pool` through the bouncer; killed afterwards."""
    running: list[Supervisor] = []

    def start(*, pgbouncer_mode: bool) -> Supervisor:
        heartbeat_dir = tmp_path / f"heartbeats{len(running)}"
        heartbeat_dir.mkdir(mode=0o700)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
        }
        url = bouncer.url(db_url).render_as_string(hide_password=False)
        env.update(WORKERPOOL_DATABASE_URL=url, PYTHONPATH=str(ROOT))
        if pgbouncer_mode:
            env[settings.PGBOUNCER_ENV] = "1"
        log_path = tmp_path / f"supervisor{len(running)}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    "tests.apps.bouncer:pool",
                    "--heartbeat-dir",
                    str(heartbeat_dir),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                cwd=ROOT,
            )
        running.append(Supervisor(proc, log_path, heartbeat_dir, env))
        return running[-1]

    yield start
    kill_all(running, show_logs=True)
