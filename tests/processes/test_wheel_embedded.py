"""`pip install 'workerpool[embedded]'` makes `workerpool demo` work with no database at all:
the wheel with its extra in a fresh venv, the demo run from a directory where it starts its own
PostgreSQL (pgserver) under .workerpool/, and that server stopped by the demo when it ends."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.helpers.waiting import wait_until
from tests.helpers.wheel import build_wheel, fresh_venv, user_env


def test_the_embedded_extra_runs_the_demo_without_a_database(tmp_path):
    venv = fresh_venv(tmp_path, f"{build_wheel(tmp_path)}[embedded]")
    home = tmp_path / "home"
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
