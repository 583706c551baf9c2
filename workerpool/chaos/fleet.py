"""The supervisors of a chaos run: real ``workerpool run`` processes, each in its own session.

A supervisor that the run SIGKILLs leaves its children to notice on their own (they must exit:
``PR_SET_PDEATHSIG`` and the parent check); the fleet remembers the group and reports anything
still alive in it a while later as an orphan. Everything is killed by process group at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..process.oslayer import child_pids

APP = "workerpool.chaos.app:pool"
STARTED = "supervisor_started"
ORPHAN_WAIT = 6.0  # seconds a dead supervisor's children get to exit (drain 2 s + margins)


@dataclass
class Member:
    process: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    draining: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def children(self) -> list[int]:
        return child_pids(self.pid)


def _read(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")
    return ""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


class Fleet:
    """``size`` supervisors kept up; ``replace`` starts a new one in a killed one's place."""

    def __init__(self, env: dict[str, str], workdir: Path, size: int) -> None:
        self.env, self.workdir, self.size = env, workdir, size
        self.members: list[Member] = []
        self.gone: list[tuple[int, float]] = []  # (pgid, when) of supervisors killed or stopped
        self.exit_codes: list[tuple[int, int | None, str]] = []  # (pid, code, how it was stopped)
        self._count = 0
        self._lock = threading.Lock()

    def count_in_logs(self, text: str) -> int:
        """How often ``text`` occurs in every supervisor's log, the killed ones' too."""
        return sum(_read(path).count(text) for path in self.workdir.glob("supervisor-*.log"))

    def start(self) -> Member:
        self._count += 1
        log_path = self.workdir / f"supervisor-{self._count}.log"
        beats = self.workdir / f"heartbeats-{self._count}"
        beats.mkdir(mode=0o700)
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    APP,
                    "--heartbeat-dir",
                    str(beats),
                    "--restart-delay",
                    "0.2",
                    "--boot-retries",
                    "1000",
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                cwd=self.workdir,
            )
        member = Member(process, log_path)
        with self._lock:
            self.members.append(member)
        return member

    def fill(self) -> None:
        while len(self.members) < self.size:
            self.start()

    def live(self) -> list[Member]:
        """Supervisors serving: alive and not draining (a later fault must not hit a drain)."""
        with self._lock:
            return [m for m in self.members if m.process.poll() is None and not m.draining]

    def pick(self, index: int) -> Member | None:
        live = self.live()
        return live[index % len(live)] if live else None

    def children(self) -> list[int]:
        return sorted(pid for m in self.live() for pid in m.children())

    def kill(self, member: Member) -> None:
        """SIGKILL the supervisor alone; its children are on their own."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.pid, signal.SIGKILL)
        member.process.wait()
        self._forget(member, -signal.SIGKILL, "SIGKILL")

    def terminate(self, member: Member, timeout: float) -> int | None:
        """SIGTERM (a drain); returns the exit code, None if it had to be killed."""
        # it installs its signal handlers before it logs this line; before, SIGTERM's default
        # action kills it (nothing is forked yet, so nothing is lost)
        how = "SIGTERM" if STARTED in _read(member.log_path) else "SIGTERM early"
        member.draining = True
        member.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = member.process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(member.pid, signal.SIGKILL)
            member.process.wait()
        self._forget(member, code, how)
        return code

    def _forget(self, member: Member, code: int | None, how: str) -> None:
        with self._lock:
            if member in self.members:
                self.members.remove(member)
            self.gone.append((member.pid, time.monotonic()))
            self.exit_codes.append((member.pid, code, how))

    def orphans(self, now: float | None = None) -> list[tuple[int, list[int]]]:
        """Groups of gone supervisors with processes alive ``ORPHAN_WAIT`` after the end."""
        now = time.monotonic() if now is None else now
        return [
            (pgid, alive)
            for pgid, when in self.gone
            if now - when > ORPHAN_WAIT and (alive := group_members(pgid))
        ]

    def stop_all(self, timeout: float) -> None:
        for member in self.live():
            self.terminate(member, timeout)

    def kill_everything(self) -> None:
        for pgid in [m.pid for m in self.members] + [pgid for pgid, _ in self.gone]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for member in self.members:
            with contextlib.suppress(Exception):
                member.process.wait(5)
