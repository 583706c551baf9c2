"""Fixtures for the tests that run `workerpool run` on ``tests/apps/basic.py``, and the browser
tests' (``tests/helpers/browser.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.apps import basic, limits
from tests.helpers.apps import app_pool
from tests.helpers.browser import artifacts, browser, dashboard  # noqa: F401 (fixtures)
from tests.helpers.paths import ROOT
from tests.helpers.pgbouncer import through_bouncer  # noqa: F401 (a fixture)
from tests.helpers.processes import Supervisor, kill_all, supervisors
from tests.helpers.replicas import LIMITS_APP, Replicas

STALE_MS = "3600000"  # one hour: recovery within seconds can only be the crash-release path


@pytest.fixture
def start(db_url, tmp_path) -> Iterator:
    """Start `workerpool run tests.apps.basic:pool` (own session); always killed afterwards.

    ``command`` replaces ``-m workerpool`` with a runner that builds the same supervisor with
    faults injected (tests/apps/boot_failure.py)."""
    running: list[Supervisor] = []

    def launch(
        *args: str,
        env: dict[str, str] | None = None,
        command: tuple[str, ...] = ("-m", "workerpool"),
    ) -> Supervisor:
        heartbeat_dir = tmp_path / "heartbeats"
        heartbeat_dir.mkdir(mode=0o700, exist_ok=True)
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
        }
        full_env.update(
            {
                "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
                "WORKER_CLAIM_STALE_MS": STALE_MS,
                "PYTHONPATH": str(ROOT),
                **(env or {}),
            }
        )
        log_path = tmp_path / f"supervisor-{len(running)}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    *command,
                    "run",
                    "tests.apps.basic:pool",
                    "--heartbeat-dir",
                    str(heartbeat_dir),
                    *args,
                ],
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                cwd=ROOT,
            )
        sup = Supervisor(proc, log_path, heartbeat_dir, full_env)
        running.append(sup)
        return sup

    yield launch
    kill_all(running)


@pytest.fixture
def app(request, db_url):
    """The enqueue side of the test module's ``APP`` (a module of ``tests/apps`` with a
    ``build(url)``; ``tests/apps/basic.py`` by default) on the test's database, once the test
    module's ``APP_TABLES`` (the tables its handlers write) are made."""
    module = getattr(request.module, "APP", basic)
    with app_pool(module, db_url, getattr(request.module, "APP_TABLES", ())) as pool:
        yield pool


@pytest.fixture
def supervise(request, db_url, tmp_path) -> Iterator:
    """A launcher of ``workerpool run`` supervisors of the test module's ``APP``."""
    module = getattr(request.module, "APP", basic)
    with supervisors(f"{module.__name__}:pool", db_url, tmp_path) as launch:
        yield launch


@pytest.fixture
def replicas(db_url, tmp_path, sql) -> Iterator[Replicas]:
    """Supervisors of tests/apps/limits.py on this test's database, its ledger table made."""
    sql(limits.LEDGER)
    group = Replicas(LIMITS_APP, db_url, tmp_path)
    yield group
    group.stop()
