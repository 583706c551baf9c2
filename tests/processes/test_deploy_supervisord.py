"""deploy/supervisord.conf under real supervisord: `supervisorctl stop` mid-job drains, no loss.

The [program:workerpool] section is used as shipped for everything that decides how it stops
(stopsignal, stopwaitsecs, stopasgroup, killasgroup, autorestart); only paths, the command and
the environment are substituted for this machine.
"""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from supervisor.datatypes import dict_of_key_value_pairs

from tests.helpers.paths import ROOT
from tests.helpers.processes import alive
from tests.helpers.waiting import wait_until
from workerpool.model.specs import QueueSpec
from workerpool.process.oslayer import child_pids, usable_cpus
from workerpool.process.settings import GRACE_ENV, SHUTDOWN_MARGIN

CONF = ROOT / "deploy" / "supervisord.conf"
PROGRAM = "program:workerpool"
DRAIN = 2.0  # the test's drain_timeout: short, so that the test is quick

APP = """
import time
from workerpool import WorkerPool

pool = WorkerPool()
pool.queue("work", concurrency=4, poll_interval=0.2)

@pool.task(queue="work")
def nap(job):
    time.sleep(job.payload["seconds"])
"""


def shipped() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    assert parser.read(CONF), f"{CONF} is missing"
    return parser


def test_shipped_program_stops_the_way_the_supervisor_expects() -> None:
    program = shipped()[PROGRAM]
    env = dict_of_key_value_pairs(program["environment"])
    drain = float(env.get("WORKERPOOL_DRAIN_TIMEOUT", QueueSpec(name="defaults").drain_timeout))
    assert program["stopsignal"] == "TERM"
    assert float(program["stopwaitsecs"]) > drain + SHUTDOWN_MARGIN
    assert float(env[GRACE_ENV]) == float(program["stopwaitsecs"]), (
        f"{GRACE_ENV} must repeat stopwaitsecs so that the supervisor refuses a drain that "
        f"does not fit"
    )
    assert program["stopasgroup"] == "false", "the supervisor relays SIGTERM to its children"
    assert program["killasgroup"] == "true", "a SIGKILL must not leave orphaned children"
    assert program["autorestart"] == "true"
    assert program["redirect_stderr"] == "true" and program["stdout_logfile"].startswith("/")
    assert "password" not in program["environment"].lower()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short path: a unix socket path must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="wpsv-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def configure(directory: Path, db_url) -> Path:
    """The shipped file with this machine's paths, plus the sections supervisord itself needs."""
    parser = shipped()
    program = parser[PROGRAM]
    # the shipped arguments after APP:POOL (--processes default=auto), on this app's queue
    shipped_args = [arg.replace("default=", "work=") for arg in shlex.split(program["command"])[3:]]
    program["command"] = literal(
        f"{sys.executable} -m workerpool run supervised_app:pool {shlex.join(shipped_args)}"
    )
    program["directory"] = literal(str(directory))
    program.pop("user", None)  # run as whoever runs the test
    env = dict_of_key_value_pairs(program["environment"])
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
            "WORKERPOOL_DRAIN_TIMEOUT": str(DRAIN),
            "WORKERPOOL_HEARTBEAT_DIR": str(directory / "heartbeat"),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{directory}",
        }
    )
    program["environment"] = ",".join(f'{k}="{literal(v)}"' for k, v in env.items())
    program["stdout_logfile"] = str(directory / "workerpool.log")
    socket = directory / "supervisor.sock"
    parser["supervisord"] = {
        "logfile": str(directory / "supervisord.log"),
        "pidfile": str(directory / "supervisord.pid"),
        "childlogdir": str(directory),
        "nodaemon": "true",
    }
    parser["unix_http_server"] = {"file": str(socket), "chmod": "0700"}
    parser["rpcinterface:supervisor"] = {
        "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"
    }
    parser["supervisorctl"] = {"serverurl": f"unix://{socket}"}
    path = directory / "supervisord.conf"
    with path.open("w") as handle:
        parser.write(handle)
    return path


def literal(value: str) -> str:
    """supervisord expands %(name)s in values: a literal % (e.g. %2F in a URL) is written %%."""
    return value.replace("%", "%%")


def ctl(conf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.supervisorctl", "-c", str(conf), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def supervisord(short_dir: Path, db_url) -> Iterator[Path]:
    (short_dir / "supervised_app.py").write_text(APP)
    conf = configure(short_dir, db_url)
    output = (short_dir / "supervisord.out").open("w")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)],
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        try:
            wait_until(
                lambda: "RUNNING" in ctl(conf, "status", "workerpool").stdout,
                timeout=30,
                message="supervisord to report workerpool RUNNING",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(short_dir)}") from None
        yield conf
    finally:
        ctl(conf, "shutdown")
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        output.close()


def logs(directory: Path) -> str:
    """What supervisord and the program wrote, for a failure message."""
    parts = []
    for name in ("supervisord.out", "supervisord.log", "workerpool.log"):
        path = directory / name
        text = path.read_text(errors="replace")[-3000:] if path.exists() else "(missing)"
        parts.append(f"--- {name}\n{text}")
    return "\n".join(parts)


def test_supervisorctl_stop_mid_job_drains_and_loses_nothing(supervisord: Path, pool, sql) -> None:
    conf = supervisord
    pool.task(queue="work", name="nap")(lambda job: None)  # enqueue-side declaration of APP's task
    short = pool.enqueue_many([("nap", {"seconds": 0.1}) for _ in range(6)])
    finishing = pool.enqueue_many([("nap", {"seconds": 1.0}) for _ in range(2)])  # < drain
    too_long = pool.enqueue("nap", {"seconds": 60})  # > drain: must be released, not lost
    wait_until(
        lambda: (
            sql(
                "SELECT count(*) FROM workerpool_jobs WHERE state = 'processing' AND id = ANY(%s)",
                [*finishing, too_long],
            )[0][0]
            == 3
        ),
        timeout=30,
        message="the 1 s and 60 s jobs to be running",
    )
    supervisor_pid = int(ctl(conf, "pid", "workerpool").stdout.strip())
    children = child_pids(supervisor_pid)
    # --processes work=auto: one work child per usable core, and the maintenance child
    assert len(children) == usable_cpus() + 1, children
    assert_probe_healthy(conf.parent / "heartbeat")

    stopped = ctl(conf, "stop", "workerpool")

    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped
    log = (conf.parent / "supervisord.log").read_text()
    assert "stopped: workerpool (exit status 0)" in log, "drained and exited 0, not SIGKILLed"
    states = dict(sql("SELECT id, state FROM workerpool_jobs"))
    assert len(states) == 9, "nothing lost"
    assert all(states[i] == "done" for i in short + finishing), states
    assert states[too_long] == "pending"
    attempts, errors = sql("SELECT attempts, errors FROM workerpool_jobs WHERE id = %s", too_long)[
        0
    ]
    assert attempts == 0, "a drain release refunds the attempt"
    assert [e["type"] for e in errors] == ["Interrupted"]
    assert not [pid for pid in [supervisor_pid, *children] if alive(pid)], "no process left"
    assert "STOPPED" in ctl(conf, "status", "workerpool").stdout


def assert_probe_healthy(heartbeat_dir: Path) -> None:
    """The Kubernetes liveness command, run against this supervisor's heartbeat directory."""
    manifest = ROOT / "deploy" / "kubernetes" / "deployment.yaml"
    spec = yaml.safe_load(manifest.read_text())["spec"]["template"]["spec"]["containers"][0]
    argv = list(spec["livenessProbe"]["exec"]["command"])
    argv[argv.index("--dir") + 1] = str(heartbeat_dir)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    wait_until(
        lambda: (
            subprocess.run(
                [sys.executable, "-m", *argv], env=env, capture_output=True, timeout=30
            ).returncode
            == 0
        ),
        timeout=15,
        message="the liveness probe to pass",
    )
