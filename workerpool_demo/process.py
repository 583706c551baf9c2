"""`workerpool run` as a child process of the demo, in its own session, logging to a file."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sqlalchemy.engine import URL

from workerpool.process.oslayer import set_parent_death_signal

from .database import url_text

RUN_COMMAND = [sys.executable, "-m", "workerpool", "run"]
#: A short restart backoff: the poison message crashes the email child a few times in a row.
RUN_OPTIONS = ["--restart-delay", "0.25"]
#: Seconds to wait for the supervisor to drain: the app's drain_timeout (5 s) plus its margin,
#: with room to spare on a slow machine.
DRAIN_WAIT = 60.0


def _drain_when_the_demo_dies() -> None:  # runs in the forked child, before exec
    set_parent_death_signal(signal.SIGTERM)


class Supervisor:
    """``workerpool run <app>:pool``; its own session, so a Ctrl-C here reaches it only once."""

    def __init__(self, app: str, url: URL, log_path: Path) -> None:
        self.heartbeat_dir = tempfile.mkdtemp(prefix="workerpool-demo-")
        env = dict(
            os.environ,
            WORKERPOOL_DATABASE_URL=url_text(url),
            WORKERPOOL_HEARTBEAT_DIR=self.heartbeat_dir,
        )
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [*RUN_COMMAND, f"{app}:pool", *RUN_OPTIONS],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_drain_when_the_demo_dies,
        )
        self.kills: list[tuple[float, int, str]] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def children(self) -> list[tuple[int, str]]:
        """``(pid, title)`` of each live child, from /proc (no signal is sent to find them)."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [(int(pid), process_title(int(pid))) for pid in text.split()]

    def kill_random_child(self, rng: random.Random, elapsed: float) -> tuple[int, str] | None:
        children = self.children()
        if not children:
            return None
        pid, title = rng.choice(children)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        self.kills.append((elapsed, pid, title))
        return pid, title

    def signal(self, signum: int) -> None:
        if self.running():
            self.process.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Leave nothing running: drain if still up (an error got us here), kill if that hangs."""
        if self.running():
            self.signal(signal.SIGTERM)
            if self.wait(DRAIN_WAIT) is None:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.heartbeat_dir, ignore_errors=True)

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def process_title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"
