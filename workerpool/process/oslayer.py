"""Every system call the supervisor makes, behind one seam (supervisord's ``options``).

:class:`RealOS` does the work; tests swap in a fake that records kills and scripts exits, so the
supervisor's state machine can be tested without processes or sleeps.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from ..model import exitcodes
from . import heartbeat

#: Signals the supervisor handles. They are blocked around fork so that a child never runs the
#: parent's handlers: it installs its own first, then unblocks.
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD)
_PR_SET_PDEATHSIG = 1


def describe_status(status: int) -> str:
    """``exit:0``, ``exit:3`` or ``signal:SIGKILL`` for a waitpid status."""
    if os.WIFSIGNALED(status):
        return f"signal:{signal_name(os.WTERMSIG(status))}"
    if os.WIFEXITED(status):
        return f"exit:{os.WEXITSTATUS(status)}"
    return f"status:{status}"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies. False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` forked that are still alive (Linux ``/proc``; [] if it is gone)."""
    with contextlib.suppress(OSError):
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    return []


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: what ``processes="auto"`` forks one child for.

    ``os.cpu_count()`` is the host's count: in a container limited to 2 CPUs on a 64-core node
    it says 64, and 64 children would share 2 CPUs' worth of time while holding 64 times the
    connections. So: the CPUs this process may be scheduled on (its affinity), capped by the
    cgroup's CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded up; at least 1.
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(count, math.ceil(quota))) if quota else max(1, count)


def _cgroup_quota(root: Path) -> float | None:
    """CPUs' worth of time the cgroup may use per period, or None without a quota."""
    for quota_file, period_file in (
        ("cpu.max", None),
        ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
    ):
        try:
            fields = (root / quota_file).read_text().split()
            if period_file is not None:
                fields.append((root / period_file).read_text().strip())
            quota, period = fields[0], fields[1]
            if quota in ("max", "-1"):
                return None
            return int(quota) / int(period) if int(quota) > 0 and int(period) > 0 else None
        except (OSError, ValueError, IndexError):
            continue
    return None


def set_title(title: str) -> None:
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(title)


def shed_parent_state(title: str, close_fds: tuple[int, ...]) -> None:
    """Right after the fork: a title of its own, default signal handling, none of the
    parent's descriptors (its wakeup pipe, the other children's pipes)."""
    set_title(title)
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class RealOS:
    """The operating system, as the supervisor uses it."""

    def __init__(self) -> None:
        self._wakeup_r = -1
        self._wakeup_w = -1

    # -- clocks ------------------------------------------------------------------------------

    def monotonic(self) -> float:
        return time.monotonic()

    def getpid(self) -> int:
        return os.getpid()

    # -- signals -----------------------------------------------------------------------------

    def install_signals(self, handler: Callable[[int, object], None]) -> None:
        """Route HANDLED_SIGNALS to ``handler`` and wake :meth:`wait` through a self-pipe."""
        self._wakeup_r, self._wakeup_w = os.pipe()
        for fd in (self._wakeup_r, self._wakeup_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wakeup_w, warn_on_full_buffer=False)
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, handler)

    def restore_signals(self) -> None:
        for signum in HANDLED_SIGNALS:
            signal.signal(
                signum, signal.SIG_DFL if signum != signal.SIGINT else signal.default_int_handler
            )
        signal.set_wakeup_fd(-1)
        for fd in (self._wakeup_r, self._wakeup_w):
            if fd >= 0:
                os.close(fd)
        self._wakeup_r = self._wakeup_w = -1

    def own_fds(self) -> list[int]:
        """Descriptors a forked child must close (it has its own wake-up pipe)."""
        return [fd for fd in (self._wakeup_r, self._wakeup_w) if fd >= 0]

    # -- processes ---------------------------------------------------------------------------

    def spawn(self, target: Callable[[int], int]) -> tuple[int, int]:
        """Fork; the child runs ``target(write_fd)`` and exits with its result.

        Returns ``(pid, read_fd)``: the parent's non-blocking end of the child's report pipe.
        Handled signals stay blocked across the fork; ``target`` unblocks them in the child once
        it has installed its own handlers.
        """
        read_fd, write_fd = os.pipe()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            self._run_child(target, write_fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        return pid, read_fd

    @staticmethod
    def _run_child(target: Callable[[int], int], write_fd: int) -> None:
        code = exitcodes.BOOT_FAILED
        try:
            code = target(write_fd)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else exitcodes.FAILURE
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def kill(self, pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    def reap(self) -> list[tuple[int, int]]:
        """Every exited child, known or not: ``waitpid(-1, WNOHANG)`` until nothing is left."""
        exited = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            exited.append((pid, status))
        return exited

    # -- pipes -------------------------------------------------------------------------------

    def wait(self, fds: list[int], timeout: float) -> list[int]:
        """Block until one of ``fds`` is readable, a signal arrives, or ``timeout`` passes."""
        watched = fds + ([self._wakeup_r] if self._wakeup_r >= 0 else [])
        try:
            ready, _, _ = select.select(watched, [], [], max(0.0, timeout))
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
            return []
        if self._wakeup_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wakeup_r, 512):
                    pass
        return [fd for fd in ready if fd != self._wakeup_r]

    def read(self, fd: int) -> bytes | None:
        """What the pipe holds: bytes, ``b""`` at end of file, None if nothing yet."""
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return b"".join(chunks) if chunks else None
            if not chunk:
                return b"".join(chunks) if chunks else b""
            chunks.append(chunk)

    def close(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            os.close(fd)

    # -- files -------------------------------------------------------------------------------

    def touch(self, path: Path) -> None:
        heartbeat.touch(path)
