"""The parent's side of the releaser: which claims nobody released, and the releaser's lifetime.

As the supervisor exits, the worker ids of queue children that died during shutdown without
draining (SIGKILLed at the deadline, crashed, FATAL) and orphans no replacement took still hold
leases until ``stale_after``. :class:`ExitRelease` forks one short-lived
:class:`~workerpool.releaser.Releaser` for them, reads its report, and gives it at most
``release_margin`` seconds before a SIGKILL. Standard library only, like the supervisor.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from typing import Any

from .oslayer import describe_status
from .settings import WorkerKind
from .slots import LIVE, Slot, close_pipe, read_lines

#: These lines are the supervisor's own: logged under its name.
log = logging.getLogger("workerpool.supervisor")


def unreleased(slots: list[Slot]) -> tuple[str, ...]:
    """Worker ids whose claims nobody released: dead queue children and untaken orphans."""
    ids = [worker_id for slot in slots
           if slot.worker.kind == WorkerKind.QUEUE and slot.state not in LIVE
           for worker_id in slot.orphans]
    return tuple(dict.fromkeys(ids))


@dataclass
class ExitRelease:
    """The releaser child forked at exit (or the decision that none was needed)."""

    worker_ids: tuple[str, ...] = ()
    pid: int | None = None
    fd: int | None = None
    buffer: bytes = b""
    deadline: float = 0.0
    rows: int | None = None  # what it reported releasing
    done: bool = False

    def spawn(self, os_layer: Any, releaser: Any, margin: float) -> bool:
        """Fork ``releaser``; give it ``margin`` seconds. False if the fork failed."""
        try:
            self.pid, self.fd = os_layer.spawn(releaser.start)
        except OSError as exc:
            self.done = True
            log.error("release failed: cannot fork the releaser (%s); %d dead worker(s) left to "
                      "the stale recovery", exc, len(self.worker_ids),
                      extra={"event": "release_failed"})
            return False
        self.deadline = os_layer.monotonic() + margin
        log.info("releaser started pid=%d workers=%s", self.pid, ",".join(self.worker_ids),
                 extra={"event": "releaser_started", "pid": self.pid})
        return True

    def read(self, os_layer: Any) -> None:
        """Its pipe is readable: ``r <rows>`` says what it released."""
        self._parse(read_lines(os_layer, self))

    def exited(self, os_layer: Any, status: int) -> None:
        self._parse(close_pipe(os_layer, self))
        self.done = True
        self._log(describe_status(status))

    def finished(self, os_layer: Any) -> bool:
        """Done, or killed now that its deadline passed (no wait for the reap: we exit now)."""
        if not self.done and os_layer.monotonic() >= self.deadline:
            os_layer.kill(self.pid, signal.SIGKILL)
            self.done = True
            self._log("killed at its deadline")
        return self.done

    def _parse(self, lines: list[str]) -> None:
        for line in lines:
            if line.startswith("r ") and line[2:].strip().isdecimal():
                self.rows = int(line[2:])

    def _log(self, how: str) -> None:
        count = len(self.worker_ids)
        if self.rows is not None:
            log.warning("orphans released at exit: count=%d workers=%d releaser=%s",
                        self.rows, count, how,
                        extra={"event": "orphans_released_at_exit", "count": self.rows})
        else:
            log.error("release failed: releaser %s; the jobs of %d dead worker(s) return after "
                      "stale_after", how, count,
                      extra={"event": "release_failed", "count": count})
