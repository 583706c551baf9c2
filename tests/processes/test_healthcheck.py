"""`workerpool healthcheck`: exit codes, messages, and what it does not import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.waiting import wait_until
from workerpool.process import heartbeat
from workerpool.process.healthcheck import check


def stamp(directory: Path, worker: str, age: float) -> None:
    heartbeat.touch(heartbeat.path_for(directory, worker), time.time() - age)


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    full_env.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "workerpool", "healthcheck", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def hb(tmp_path: Path) -> Path:
    directory = tmp_path / "hb"
    directory.mkdir(mode=0o700)
    return directory


def test_every_file_fresh_is_healthy(hb):
    stamp(hb, "email", 1)
    stamp(hb, "supervisor", 0)
    verdict = check(hb, max_age=5)
    assert verdict.healthy and verdict.message.startswith("ok: email 1.0s, supervisor 0.0s")


def test_the_stalest_file_is_named_with_its_age(hb):
    stamp(hb, "email", 1)
    stamp(hb, "sms", 12.3)
    stamp(hb, "supervisor", 7)
    verdict = check(hb, max_age=5)
    assert not verdict.healthy
    assert verdict.message.startswith("sms: heartbeat is 12.") and "(max 5s)" in verdict.message


def test_named_workers_only_and_a_missing_one_is_unhealthy(hb):
    stamp(hb, "email", 1)
    stamp(hb, "sms", 100)
    assert check(hb, 5, ["email"]).healthy
    verdict = check(hb, 5, ["email", "billing"])
    assert not verdict.healthy and verdict.message == f"billing: no heartbeat file in {hb}"


def test_an_empty_or_missing_directory_is_unhealthy(hb, tmp_path):
    assert check(hb, 5).message == f"no heartbeat files in {hb}"
    assert not check(tmp_path / "nowhere", 5).healthy


def test_a_future_mtime_counts_as_fresh(hb):
    stamp(hb, "email", -30)  # the wall clock stepped back
    assert check(hb, 5).healthy


def test_cli_exit_codes_and_one_line_messages(hb):
    stamp(hb, "email", 0.5)
    stamp(hb, "sms", 0.5)
    ok = healthcheck("--dir", str(hb), "--max-age", "10")
    assert ok.returncode == 0 and ok.stdout.startswith("workerpool healthcheck: ok: email")

    stamp(hb, "sms", 40)
    stale = healthcheck("--dir", str(hb), "--max-age", "10")
    assert stale.returncode == 1 and stale.stdout == ""
    # the age is read when the command runs: its start-up on a loaded machine adds to the 40 s
    age = re.fullmatch(
        r"workerpool healthcheck: sms: heartbeat is ([\d.]+)s old \(max 10s\)\n", stale.stderr
    )
    assert age and 40 <= float(age[1]) < 70, stale.stderr
    assert len(stale.stderr.splitlines()) == 1

    named = healthcheck("--dir", str(hb), "--max-age", "10", "email")
    assert named.returncode == 0

    bad = healthcheck("--dir", str(hb), "--max-age", "0")
    assert bad.returncode == 1 and "--max-age must be > 0" in bad.stderr


def test_cli_reads_the_directory_from_the_environment(hb):
    stamp(hb, "email", 0)
    assert healthcheck(env={"WORKERPOOL_HEARTBEAT_DIR": str(hb)}).returncode == 0
    stamp(hb, "email", 200)  # the default max-age is 90 s
    assert healthcheck(env={"WORKERPOOL_HEARTBEAT_DIR": str(hb)}).returncode == 1


def test_the_probe_imports_nothing_heavy(hb):
    stamp(hb, "email", 0)
    code = (
        "import sys\n"
        "from workerpool.cli import main\n"
        f"rc = main(['healthcheck', '--dir', {str(hb)!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'psycopg', 'alembic', 'croniter'))\n"
        "print(rc, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=30,
    )
    assert done.stdout.strip().endswith("0 []"), done.stdout + done.stderr


def test_prepare_dir_refuses_unsafe_directories(tmp_path):
    good = tmp_path / "new" / "hb"
    heartbeat.prepare_dir(good)  # created, 0700
    assert (good.stat().st_mode & 0o777) == 0o700
    assert (good / "supervisor.heartbeat").exists()
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(heartbeat.HeartbeatDirError, match="is a symlink"):
        heartbeat.prepare_dir(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o770)
    with pytest.raises(heartbeat.HeartbeatDirError, match="group- or world-writable"):
        heartbeat.prepare_dir(shared)
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(heartbeat.HeartbeatDirError):
        heartbeat.prepare_dir(a_file)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away takes root")
def test_prepare_dir_refuses_another_users_directory(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # nobody's: it could forge or delete the probe's files
    with pytest.raises(heartbeat.HeartbeatDirError, match="belongs to uid 65534"):
        heartbeat.prepare_dir(theirs)


def test_remove_all_keeps_only_the_supervisors_file(hb):
    for name in ("email", "sms", "supervisor"):
        stamp(hb, name, 0)
    assert heartbeat.remove_all(hb) == ["email", "sms"]
    assert heartbeat.list_workers(hb) == ["supervisor"]


def test_a_child_that_never_reaches_the_database_goes_stale(start):
    # a supervisor needs no database, its children never get one: none of them ever ticks
    sup = start(env={"WORKERPOOL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    sup.child_pid("fast")
    stale = wait_until(
        lambda: (lambda r: r.returncode == 1 and r)(sup.healthcheck("--max-age", "1.5")),
        15,
        message=f"a child's file stale\n{sup.log()}",
    )
    assert re.fullmatch(
        r"workerpool healthcheck: (fast|slow|@maintenance): heartbeat is "
        r"[\d.]+s old \(max 1\.5s\)\n",
        stale.stderr,
    ), stale.stderr
    assert not sup.events("child_running")
    assert sup.healthcheck("--max-age", "1.5", "supervisor").returncode == 0
