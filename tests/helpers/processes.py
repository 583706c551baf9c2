"""Real processes: a running `workerpool run` read through its log, and /proc checks.

A test starts `workerpool run` in its own session, so that teardown can SIGKILL the whole
process group (supervisor and children) and nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.helpers.waiting import wait_until

LINE = re.compile(r" (?P<logger>[\w.]+)\[(?P<pid>\d+)\] (?P<event>\w+): (?P<message>.*)$")
PAIR = re.compile(r"(\w+)=(\S+)")


@dataclass
class Event:
    name: str
    logger: str
    message: str
    fields: dict[str, str]
    at: float  # seconds since the epoch, from the log line


@dataclass
class Supervisor:
    """A running `workerpool run`, its log, and its heartbeat directory."""

    proc: subprocess.Popen
    log_path: Path
    heartbeat_dir: Path
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(
        self, name: str | None = None, *, logger: str = "supervisor", **match: str
    ) -> list[Event]:
        """Log events of ``name`` from ``workerpool.<logger>`` whose key=value fields match."""
        found = []
        for line in self.log().splitlines():
            parsed = LINE.search(line)
            if not parsed or (name and parsed["event"] != name):
                continue
            if parsed["logger"] != f"workerpool.{logger}":
                continue
            fields = dict(PAIR.findall(parsed["message"]))
            if all(fields.get(k) == v for k, v in match.items()):
                found.append(
                    Event(
                        parsed["event"], parsed["logger"], parsed["message"], fields, _stamp(line)
                    )
                )
        return found

    def child_pid(self, worker: str) -> int:
        """The pid of the newest child serving ``worker``."""
        started = wait_until(
            lambda: self.events("child_started", worker=worker),
            15,
            message=f"{worker} child started",
        )
        return int(started[-1].fields["pid"])

    def wait_running(self, *workers: str) -> None:
        for worker in workers:
            wait_until(
                lambda w=worker: self.events("child_running", worker=w),
                15,
                message=f"{worker} child running\n{self.log()}",
            )

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"supervisor still running after {timeout}s\n{self.log()}"
            ) from None

    def healthcheck(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "workerpool",
                "healthcheck",
                "--dir",
                str(self.heartbeat_dir),
                *args,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def heartbeat_mtime(self, worker: str) -> float:
        try:
            return (self.heartbeat_dir / f"{worker}.heartbeat").stat().st_mtime
        except FileNotFoundError:
            return 0.0


def _stamp(line: str) -> float:
    text = line[:23]  # "2026-01-01 12:00:00,123"
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return 0.0


def start_supervisor(
    app: str, db_url: Any, tmp_path: Path, *args: str, **extra_env: str
) -> Supervisor:
    """``workerpool run APP [ARGS]`` on ``db_url`` in its own session (stale arm off: an
    hour), with its heartbeats and log under ``tmp_path``; ``extra_env`` on top of a clean
    environment."""
    from tests.helpers.paths import ROOT

    heartbeat_dir = tmp_path / "heartbeats"
    heartbeat_dir.mkdir(mode=0o700, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
    }
    env.update(
        {
            "WORKERPOOL_DATABASE_URL": db_url.render_as_string(hide_password=False),
            "WORKER_CLAIM_STALE_MS": "3600000",
            "PYTHONPATH": str(ROOT),
            **extra_env,
        }
    )
    log_path = tmp_path / "supervisor.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workerpool",
                "run",
                app,
                "--heartbeat-dir",
                str(heartbeat_dir),
                *args,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            cwd=ROOT,
        )
    return Supervisor(proc, log_path, heartbeat_dir, env)


@contextmanager
def supervisors(app: str, db_url: Any, tmp_path: Path) -> Iterator[Callable[..., Supervisor]]:
    """A launcher of ``workerpool run APP`` supervisors (:func:`start_supervisor`; its keywords
    are environment variables on top); every one it started is SIGKILLed with its process group
    at the end."""
    running: list[Supervisor] = []

    def launch(**extra_env: str) -> Supervisor:
        sup = start_supervisor(app, db_url, tmp_path, **extra_env)
        running.append(sup)
        return sup

    try:
        yield launch
    finally:
        kill_all(running)


def kill_all(running: list[Supervisor], *, show_logs: bool = False) -> None:
    """Teardown: SIGKILL every supervisor's whole process group and reap it."""
    for sup in running:
        kill_group(sup.proc)
        sup.proc.wait(10)
        if show_logs:
            print(f"--- supervisor {sup.pid} ---\n{sup.log()[-4000:]}")  # shown on failure


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group ``proc`` leads, if anything is left of it.

    Once ``proc`` is reaped and the last of its group has exited, the group's number is free:
    the kernel may give it to a new process (``pid_max`` is 32768 here, and a test run wraps
    it), and another test's supervisor, leading a session of its own, then has that number as
    its group. Signalling it would kill that test's processes, silently.
    """
    if proc.poll() is not None and not group_alive(proc.pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie or a vanished pid is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> list[int]:
    """The running pids of process group ``pgid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (another process may take it before it is bound)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
