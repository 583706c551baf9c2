"""The releaser: a short-lived child the supervisor forks as it exits, for claims left behind.

As the supervisor exits, the worker ids of queue children that died during shutdown without
draining (SIGKILLed at the deadline, crashed, FATAL) and orphans no replacement took still hold
leases until ``stale_after``. :class:`ExitRelease` (the parent's side) forks one
:class:`Releaser` for them, reads its report, and gives it at most ``release_margin`` seconds
before a SIGKILL.

The :class:`Releaser` is built in the parent before the fork with the release to run (given by
whoever builds the supervisor: :func:`workerpool.runtime.release.release_dead_workers`), and
becomes a process after it: no heartbeat file, no signal handling beyond the defaults. It
reports ``Released(rows)`` over its pipe, reports the jobs that went dead, and exits 0 (1 on a
database error: the stale recovery takes the rows later). Standard library and the model only,
like the supervisor.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..model import exitcodes
from ..model.errors import first_line
from ..model.notices import report_dead
from . import oslayer, pipe
from .oslayer import describe_status
from .settings import WorkerKind
from .slots import LIVE, Slot

#: These lines are the supervisor's own: logged under its name.
log = logging.getLogger("workerpool.supervisor")


def unreleased(slots: list[Slot]) -> tuple[str, ...]:
    """Worker ids whose claims nobody released: dead queue children and untaken orphans."""
    ids = [
        worker_id
        for slot in slots
        if slot.worker.kind == WorkerKind.QUEUE and slot.state not in LIVE
        for worker_id in slot.orphans
    ]
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
            log.error(
                "release failed: cannot fork the releaser (%s); %d dead worker(s) left to "
                "the stale recovery",
                exc,
                len(self.worker_ids),
                extra={"event": "release_failed"},
            )
            return False
        self.deadline = os_layer.monotonic() + margin
        log.info(
            "releaser started pid=%d workers=%s",
            self.pid,
            ",".join(self.worker_ids),
            extra={"event": "releaser_started", "pid": self.pid},
        )
        return True

    def read(self, os_layer: Any) -> None:
        """Its pipe is readable: ``Released(rows)`` says what it released."""
        self._parse(pipe.read(os_layer, self))

    def exited(self, os_layer: Any, status: int) -> None:
        self._parse(pipe.close(os_layer, self))
        self.done = True
        self._log(describe_status(status))

    def finished(self, os_layer: Any) -> bool:
        """Done, or killed now that its deadline passed (no wait for the reap: we exit now)."""
        if not self.done and os_layer.monotonic() >= self.deadline:
            os_layer.kill(self.pid, signal.SIGKILL)
            self.done = True
            self._log("killed at its deadline")
        return self.done

    def _parse(self, messages: list[pipe.Message]) -> None:
        for message in messages:
            if isinstance(message, pipe.Released):
                self.rows = message.rows

    def _log(self, how: str) -> None:
        count = len(self.worker_ids)
        if self.rows is not None:
            log.warning(
                "orphans released at exit: count=%d workers=%d releaser=%s",
                self.rows,
                count,
                how,
                extra={"event": "orphans_released_at_exit", "count": self.rows},
            )
        else:
            log.error(
                "release failed: releaser %s; the jobs of %d dead worker(s) return after "
                "stale_after",
                how,
                count,
                extra={"event": "release_failed", "count": count},
            )


#: The releaser's own log lines.
releaser_log = logging.getLogger("workerpool.releaser")


class Releaser:
    """Built in the supervisor before the fork; :meth:`start` runs in the forked process.

    ``release(worker_ids)`` releases their claims and returns what it did (``rows`` and the
    ``dead`` notices); ``on_dead`` are the hooks those dead jobs are reported to;
    ``after_fork`` drops what the parent held (the application's engine) without closing it.
    """

    def __init__(
        self,
        worker_ids: tuple[str, ...],
        *,
        release: Callable[[tuple[str, ...]], Any],
        on_dead: Iterable[Callable[..., Any]] = (),
        after_fork: Callable[[], None] = lambda: None,
        parent_pid: int,
        close_fds: tuple[int, ...] = (),
    ) -> None:
        self.worker_ids = worker_ids
        self.release = release
        self.on_dead = on_dead
        self.after_fork = after_fork
        self.parent_pid = parent_pid
        self.close_fds = close_fds

    def start(self, report_fd: int) -> int:
        """Become the releaser process; return its exit code."""
        self._become_process()
        try:
            released = self.release(self.worker_ids)
        except Exception as exc:  # database down, timeout: the stale recovery takes them later
            releaser_log.warning(
                "releaser could not release %d dead worker(s): %s",
                len(self.worker_ids),
                first_line(exc),
                extra={"event": "releaser_error"},
            )
            return exitcodes.FAILURE
        pipe.send(report_fd, pipe.Released(released.rows))
        self._report_dead(released.dead)
        return exitcodes.OK

    def _become_process(self) -> None:
        oslayer.shed_parent_state("workerpool: releaser", self.close_fds)
        oslayer.set_parent_death_signal(signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, oslayer.HANDLED_SIGNALS)
        self.after_fork()

    def _report_dead(self, dead: list[Any]) -> None:
        """Exhausted rows went dead/abandoned: logged once at error level, on_dead hooks run."""
        try:
            report_dead(self.on_dead, dead)
        except Exception:
            releaser_log.exception(
                "reporting dead jobs failed", extra={"event": "report_dead_failed"}
            )
