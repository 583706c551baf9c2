"""The wheel, as a user gets it: built from the source tree, installed into a fresh venv (no
checkout on its path), and its `workerpool` command run: --help, migrate, run with a job and
healthcheck, and the demo. Also what the wheel must carry: the migrations, py.typed, the demo
package, the console script, the pytest plugin and the extras.

And `pip install 'workerpool[embedded]'`: `workerpool demo` with no database at all, run from a
directory where it starts its own PostgreSQL (pgserver) under .workerpool/, and that server
stopped by the demo when it ends.

The wheel is built once for both installs; most of the time is pip resolving the runtime
dependencies from the machine's package index.
"""

from __future__ import annotations

import email.parser
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.helpers.db import libpq
from tests.helpers.paths import ROOT
from tests.helpers.waiting import wait_until
from tests.helpers.wheel import build_wheel, fresh_venv, pip_install, user_env

APP = """
from workerpool import WorkerPool

pool = WorkerPool()
pool.queue("w", poll_interval=0.1, drain_timeout=1)


@pool.task(queue="w")
def touch(job):
    pass
"""


def check_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = {Path(n).name for n in names if n.startswith("workerpool/_alembic/versions/")}
    shipped = {p.name for p in (ROOT / "alembic" / "versions").glob("*.py")}
    assert shipped and shipped <= versions, sorted(shipped - versions)
    assert {
        "workerpool/_alembic/env.py",
        "workerpool/_alembic/script.py.mako",
        "workerpool/py.typed",
        "workerpool_demo/__init__.py",
    } <= names
    for folder in ("static", "templates"):  # the dashboard's vendored htmx, CSS and pages
        files = {
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / "workerpool" / "web" / folder).iterdir()
            if p.is_file()
        }
        assert files and files <= names, sorted(files - names)
    assert not any(n.startswith(("tests/", "examples/", "bench/")) for n in names)
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(info).decode())
    extras = set(metadata.get_all("Provides-Extra"))
    assert {"embedded", "metrics", "otel", "asyncio", "web"} <= extras
    requires = metadata.get_all("Requires-Dist")
    for extra, package in (
        ("embedded", "pgserver"),
        ("metrics", "prometheus_client"),
        ("otel", "opentelemetry-api"),
        ("asyncio", "SQLAlchemy[asyncio]"),
        ("web", "starlette"),
    ):
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), extra
    points = zipfile.ZipFile(wheel).read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "workerpool = workerpool.cli:main" in points
    assert "workerpool = workerpool.testing.plugin" in points  # [pytest11]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def private_tmp() -> Iterator[Path]:
    """A directory outside pytest's: run as root, pgserver runs PostgreSQL as a user of its own
    and opens the path to its binaries for it (chmod o+x up to /), and any pytest session that
    starts meanwhile (the plugin's tests run one) makes /tmp/pytest-of-root private again, so
    the demo could start its server and then not stop it."""
    path = Path(tempfile.mkdtemp(prefix="wp-wheel-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def venv(wheel: Path, private_tmp: Path) -> Path:
    """The wheel installed with its dependencies; the embedded test adds its extra after the
    plain install has been tried (one dependency install for both)."""
    return fresh_venv(private_tmp, str(wheel))


def test_the_wheel_installs_and_its_command_works(wheel, venv, empty_db_url, server_url, tmp_path):
    check_contents(wheel)
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "wheelapp.py").write_text(APP)
    url = empty_db_url.render_as_string(hide_password=False)
    env = user_env(WORKERPOOL_DATABASE_URL=url, PYTHONPATH=str(app_dir))

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
        )

    where = run(str(venv / "bin" / "python"), "-c", "import workerpool; print(workerpool.__file__)")
    assert where.stdout.startswith(str(venv)), where  # the installed copy, not the checkout
    command = str(venv / "bin" / "workerpool")
    helped = run(command, "--help")
    assert helped.returncode == 0 and "migrate" in helped.stdout and "healthcheck" in helped.stdout
    migrated = run(command, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    enqueued = run(
        str(venv / "bin" / "python"),
        "-c",
        "from wheelapp import pool; print(pool.enqueue('touch', {}))",
    )
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = int(enqueued.stdout)
    run_and_probe(command, env, tmp_path, empty_db_url, job_id)
    run_demo(command, env, tmp_path, server_url)


def run_and_probe(command: str, env: dict, tmp: Path, db_url, job_id: int) -> None:
    heartbeats = tmp / "heartbeats"
    log = (tmp / "run.log").open("wb")
    proc = subprocess.Popen(
        [command, "run", "wheelapp:pool", "--heartbeat-dir", heartbeats],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        with psycopg.connect(libpq(db_url), autocommit=True) as conn:
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT state FROM workerpool_jobs WHERE id = %s", (job_id,)
                    ).fetchall()
                    == [("done",)]
                ),
                30,
                message=f"the job ran\n{(tmp / 'run.log').read_text()}",
            )
        probe = subprocess.run(
            [command, "healthcheck", "--dir", heartbeats],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert probe.returncode == 0, probe
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp / "run.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def run_demo(command: str, env: dict, tmp: Path, server_url) -> None:
    """The demo ships in the wheel; on a server named by the URL it needs no [embedded]."""
    name = f"wp_wheel_demo_{secrets.token_hex(4)}"
    demo_env = {**env, "WORKERPOOL_DATABASE_URL": server_url.render_as_string(hide_password=False)}
    try:
        demo = subprocess.run(
            [command, "demo", "--duration", "1", "--users", "10", "--database", name],
            env=demo_env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    finally:
        with psycopg.connect(libpq(server_url.set(database="postgres")), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_embedded_extra_runs_the_demo_without_a_database(wheel, venv, private_tmp):
    pip_install(venv, f"{wheel}[embedded]")
    home = private_tmp / "home"
    home.mkdir()
    try:
        demo = subprocess.run(
            [venv / "bin" / "workerpool", "demo", "--duration", "1", "--users", "10"],
            env=user_env(),
            cwd=home,
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert "result: PASS" in demo.stdout
        assert (home / ".workerpool" / "pgdata" / "PG_VERSION").exists()  # its own server
        # it started the server, so it stopped it: nothing is left running
        assert not (home / ".workerpool" / "pgdata" / "postmaster.pid").exists()
    finally:
        stop_postmaster(home / ".workerpool" / "pgdata")


def stop_postmaster(pgdata: Path) -> None:
    """A safety net: stop a server the demo failed to stop, so a failure leaves nothing behind."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().split()[0])
    os.kill(pid, signal.SIGTERM)  # smart shutdown: the demo's connections are gone
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, message="embedded server stopped")
