"""Two supervisors of two apps on one host, each on its default heartbeat directory: neither
clears the other's files, and `workerpool healthcheck` judges the right one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all
from tests.helpers.waiting import wait_until
from workerpool.process.healthcheck import find

BASIC, CONTROL = "tests.apps.basic:pool", "tests.apps.control:pool"


@pytest.fixture
def host(db_url, tmp_path):
    """A launcher of `workerpool run APP` with no heartbeat directory given, all sharing one
    ``$XDG_RUNTIME_DIR`` as the supervisors of one user on one host do."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
    }
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
            "WORKER_CLAIM_STALE_MS": "3600000",
            "PYTHONPATH": str(ROOT),
            "XDG_RUNTIME_DIR": str(runtime),
        }
    )
    running: list[Supervisor] = []

    def launch(app: str, *args: str) -> Supervisor:
        log_path = tmp_path / f"supervisor-{len(running)}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workerpool", "run", app, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                cwd=ROOT,
            )
        sup = Supervisor(proc, log_path, Path(), env)
        running.append(sup)
        return sup

    launch.env = env  # type: ignore[attr-defined]
    launch.base = runtime / "workerpool"  # type: ignore[attr-defined]
    yield launch
    kill_all(running)


def started_dir(sup: Supervisor) -> Path:
    event = wait_until(
        lambda: sup.events("supervisor_started"), 30, message=f"supervisor started\n{sup.log()}"
    )[0]
    return Path(event.fields["heartbeat_dir"])


def healthcheck(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workerpool", "healthcheck", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("*.heartbeat")}


def test_two_apps_on_one_host_keep_their_own_heartbeats(host):
    basic = host(BASIC)
    basic.wait_running("fast", "slow")
    basic_dir = started_dir(basic)
    control = host(CONTROL)
    control.wait_running("ctl", "other")
    control_dir = started_dir(control)

    assert basic_dir != control_dir
    assert basic_dir.parent == control_dir.parent == host.base
    assert "removed old heartbeats" not in control.log()  # the first one's files are live
    assert {"fast.heartbeat", "slow.heartbeat"} <= files(basic_dir)
    assert {"ctl.heartbeat", "other.heartbeat"} <= files(control_dir)
    assert not files(basic_dir) & {"ctl.heartbeat", "other.heartbeat"}

    both = healthcheck(host.env)  # which app? the probe must not guess
    assert both.returncode == 1 and "supervisors run here" in both.stderr, both.stderr
    assert BASIC in both.stderr and CONTROL in both.stderr and "--app" in both.stderr
    assert len(both.stderr.splitlines()) == 1
    assert find([host.base]).message.startswith("2 supervisors run here")
    mine = healthcheck(host.env, "--app", BASIC, "fast", "slow")
    assert mine.returncode == 0, mine.stderr
    # the other app's child never answers for this one
    theirs = healthcheck(host.env, "--app", BASIC, "ctl")
    assert theirs.returncode == 1 and f"ctl: no heartbeat file in {basic_dir}" in theirs.stderr

    # a third supervisor pointed at a live one's directory is refused before it clears it
    intruder = host(CONTROL, "--heartbeat-dir", str(basic_dir))
    assert intruder.wait_exit(30) != 0
    assert "in use by a live supervisor" in intruder.log(), intruder.log()
    assert {"fast.heartbeat", "slow.heartbeat"} <= files(basic_dir)

    # a second supervisor of the same app on the same database takes a directory of its own
    again = host(BASIC)
    again_dir = started_dir(again)
    assert again_dir not in (basic_dir, control_dir) and again_dir.name.startswith(basic_dir.name)
    assert "removed old heartbeats" not in again.log()

    for sup in (control, again):
        os.kill(sup.pid, signal.SIGTERM)
        assert sup.wait_exit(60) == 0
    assert find([host.base]) == [basic_dir]  # one supervisor left: found without --app
    alone = healthcheck(host.env, "--app", BASIC, "fast")
    assert alone.returncode == 0 and "fast" in alone.stdout, alone.stderr


def test_a_restart_takes_back_the_dead_supervisors_directory(host):
    first = host(BASIC)
    first.wait_running("fast")
    directory = started_dir(first)
    os.kill(first.pid, signal.SIGKILL)  # its children are orphans for a moment
    first.wait_exit(30)
    second = host(BASIC)
    assert started_dir(second) == directory  # the lock died with the supervisor
    assert "removed old heartbeats" in second.log()
    second.wait_running("fast")
    assert healthcheck(host.env, "--app", BASIC, "fast").returncode == 0
