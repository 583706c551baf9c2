"""The supervisor's slots: one per worker type, holding the process that currently serves it.

A slot also keeps the worker ids of its dead children whose claims are still to be released
(``orphans``): its next child releases them first thing (:mod:`workerpool.runtime.release`).
Standard library only, like the supervisor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..model import exitcodes
from ..model.states import ChildState
from .heartbeat import HEARTBEAT_PERIOD
from .settings import RESTART_DELAY_CAP, STABLE_AFTER, WorkerType

#: States in which the slot's process exists (forked, not reaped yet).
LIVE = (ChildState.STARTING, ChildState.RUNNING, ChildState.STOPPING)
#: States in which the slot's process serves its worker type (not asked to stop).
SERVING = (ChildState.STARTING, ChildState.RUNNING)


@dataclass
class Slot:
    """One worker type and the process currently serving it."""

    worker: WorkerType
    state: ChildState = ChildState.BACKOFF
    pid: int | None = None
    fd: int | None = None
    buffer: bytes = b""
    worker_id: str | None = None
    started: float = 0.0
    last_tick: float = 0.0
    last_touch: float = float("-inf")
    restart_at: float = 0.0
    crashes: int = 0  # consecutive fast exits
    boot_failures: int = 0  # consecutive exits before the first tick
    orphans: list[str] = field(default_factory=list)  # dead worker ids still to release
    given: tuple[str, ...] = ()  # orphans handed to the current child
    ticked: bool = False  # the current child has reported progress at least once
    claimed: bool = False  # the current child claimed a job: it is not failing to start
    kill_at: float | None = None  # hung: SIGKILL at this time (after the stack dump)
    killed: bool = False  # we sent SIGKILL

    @property
    def name(self) -> str:
        return self.worker.name

    def spawned(self, pid: int, fd: int, now: float) -> None:
        """BACKOFF -> STARTING: a new process, handed the orphans still to release."""
        self.state, self.pid, self.fd = ChildState.STARTING, pid, fd
        self.given, self.orphans = tuple(self.orphans), []
        self.started = self.last_tick = now
        self.kill_at, self.killed, self.ticked, self.claimed = None, False, False, False
        self.last_touch = float("-inf")

    def tick(self, now: float) -> bool:
        """The child reported progress. True if that took it STARTING -> RUNNING."""
        self.last_tick = now
        if not self.ticked:
            self.ticked = True
            self.boot_failures = 0
            self.given = ()  # its first pass released them
        if self.state is ChildState.STARTING:
            self.state = ChildState.RUNNING
            return True
        return False

    def heartbeat_due(self, now: float) -> bool:
        """True at most once every HEARTBEAT_PERIOD: time to touch its heartbeat file."""
        if now - self.last_touch < HEARTBEAT_PERIOD:
            return False
        self.last_touch = now
        return True

    def reaped(self, *, drained: bool) -> None:
        """The process is gone. Unless it drained (and so released its claims itself), its
        worker id joins the orphans that the next child or the releaser releases."""
        dead = [self.worker_id] if self.worker_id and not drained else []
        self.orphans = list(dict.fromkeys([*self.given, *self.orphans, *dead]))
        self.given, self.worker_id, self.buffer, self.pid = (), None, b"", None

    def count_exit(self, now: float, *, failed_boot: bool) -> None:
        """A fast exit (before the first tick, or within STABLE_AFTER) adds to the crash count;
        a child that ran long enough starts the count again. So does one that claimed jobs:
        back-off is for children that make no progress, and the jobs a dead child held are
        suspects now, run alone, so an immediate restart cannot loop on them."""
        if self.claimed:
            self.crashes = self.boot_failures = 0
            return
        fast = failed_boot or now - self.started < STABLE_AFTER
        self.crashes = self.crashes + 1 if fast else 1
        if failed_boot:
            self.boot_failures += 1


def restart_delay(crashes: int, base: float) -> float:
    """0 for the first crash; then base * 2**(n-2), capped at RESTART_DELAY_CAP."""
    if crashes <= 1:
        return 0.0
    return min(RESTART_DELAY_CAP, base * 2 ** min(crashes - 2, 16))


def restart_cause(slot: Slot, status: int) -> str:
    """Why a child exited, as the bounded ``cause`` label of the restarts metric."""
    if slot.killed and slot.kill_at is not None:
        return "hang"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == exitcodes.RECYCLE:
        return "recycle"
    if not slot.ticked:
        return "boot_failure"
    return "signal" if os.WIFSIGNALED(status) else "exit"
