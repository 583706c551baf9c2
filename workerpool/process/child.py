"""One child process: built in the supervisor before the fork, a process after it.

``Child.__init__`` only stores what the child needs. ``Child.start`` runs in the forked process:
it resets the parent's signal handlers, closes the parent's descriptors, asks to be signalled if
the parent dies, drops the inherited database engine, and runs a ``Worker`` (one queue) or the
maintenance loop, reporting to the parent over a pipe:

    ``w <worker id>\\n``  first, before any claim: the lease owner name of this process;
    ``t\\n``              a tick after a loop pass that reached the database (the heartbeat);
    ``j\\n``              once, when the worker claims its first job (it made progress).

Signals in the child: TERM, INT and HUP drain (stop claiming, let in-flight jobs finish within
drain_timeout, release the rest), any number of times, once; QUIT stops at once (in-flight jobs
released); USR2 dumps every thread's stack to stderr. Signal handlers only note the signal: a
watcher thread reads the wake-up pipe and calls ``stop()`` so no lock is ever taken inside a
handler.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..model import exitcodes, tracing
from ..runtime.maintenance import Maintenance, MaintenanceLoop
from ..runtime.worker import Worker
from . import oslayer
from .settings import WorkerKind, WorkerType

log = logging.getLogger("workerpool.child")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_NOW_SIGNALS = (signal.SIGQUIT,)
DUMP_SIGNAL = signal.SIGUSR2
#: Ticks are sent at most this often (seconds); the parent touches files at most once a second.
TICK_INTERVAL = 0.25


class Runner(Protocol):
    def run(self) -> int: ...
    def stop(self) -> None: ...
    def stop_now(self) -> None: ...


#: Builds what a child runs: ``(pool, worker_type, *, worker_id, on_tick, parent_alive,
#: orphans) -> Runner``. :func:`build_runner` unless a test injects a fault.
RunnerFactory = Callable[..., Runner]


def build_runner(pool: Any, worker: WorkerType, *, worker_id: str, on_tick: Callable[[], None],
                 parent_alive: Callable[[], bool], orphans: tuple[str, ...],
                 on_claim: Callable[[], None] | None = None) -> Runner:
    """The maintenance loop, or a Worker on its queue with the settings loaded for it.

    Runs in the child after the fork. The runners' modules are imported with this module, in
    the parent before its first fork: a replacement child then costs a fork, not the import of
    the database stack (a few hundred milliseconds), so a queue whose child was killed is
    serving again at once.
    """
    if worker.kind == WorkerKind.MAINTENANCE:
        return MaintenanceLoop(Maintenance(pool, worker_id=worker_id), on_tick=on_tick,
                               parent_alive=parent_alive)
    return Worker(pool, worker.name, spec=worker.spec, worker_id=worker_id, on_tick=on_tick,
                  parent_alive=parent_alive, orphans=orphans, on_claim=on_claim)


class Child:
    """What the supervisor forks for one worker type."""

    def __init__(self, pool: Any, worker: WorkerType, *, parent_pid: int,
                 orphans: tuple[str, ...] = (), close_fds: tuple[int, ...] = (),
                 runner_factory: RunnerFactory = build_runner) -> None:
        self.pool = pool
        self.worker = worker
        self.parent_pid = parent_pid
        self.orphans = orphans
        self.close_fds = close_fds
        self.runner_factory = runner_factory
        self._claimed = False
        self.runner: Runner | None = None
        self._tick_fd = -1
        self._last_tick = 0.0
        self._lock = threading.Lock()
        self._requested: str | None = None  # None | "stop" | "now"

    # -- after the fork ----------------------------------------------------------------------

    def start(self, tick_fd: int) -> int:
        """Become the child process; run until drained. Returns the exit code."""
        self._tick_fd = tick_fd
        self._become_process()
        try:
            runner = self._build_runner()
        except Exception:
            log.exception("%s could not start", self.worker.name,
                          extra={"event": "child_boot_failed", "worker": self.worker.name})
            return exitcodes.BOOT_FAILED
        self._attach(runner)
        try:
            return runner.run()
        except Exception:
            log.exception("%s crashed", self.worker.name,
                          extra={"event": "child_crashed", "worker": self.worker.name})
            return exitcodes.FAILURE
        finally:
            tracing.flush()  # the child ends in os._exit: no atexit hook exports buffered spans

    def _become_process(self) -> None:
        oslayer.shed_parent_state(f"workerpool: {self.worker.name}", self.close_fds)
        os.set_blocking(self._tick_fd, False)
        self._watch_signals()
        faulthandler.register(DUMP_SIGNAL, all_threads=True)
        oslayer.set_parent_death_signal(signal.SIGTERM)
        if not self.parent_alive():  # the parent died before prctl: no signal will come
            self._request("stop")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, oslayer.HANDLED_SIGNALS)
        self.pool.forget_engine()

    def _watch_signals(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        for signum in STOP_SIGNALS + STOP_NOW_SIGNALS:
            signal.signal(signum, _note_signal)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._signal_watcher, args=(read_fd,), name="signals",
                         daemon=True).start()

    def _signal_watcher(self, read_fd: int) -> None:
        while True:
            data = os.read(read_fd, 64)
            for signum in data:
                self._request("now" if signum in STOP_NOW_SIGNALS else "stop", signum)

    def _request(self, how: str, signum: int | None = None) -> None:
        with self._lock:
            first = self._requested is None
            if how == "now" or first:
                self._requested = how
            runner = self.runner
        if signum is not None and (first or how == "now"):
            log.info("signal received worker=%s signal=%s: %s", self.worker.name,
                     oslayer.signal_name(signum),
                     "stopping now" if how == "now" else "draining",
                     extra={"event": "child_stopping", "worker": self.worker.name})
        if runner is not None:
            _apply(runner, how)

    def _attach(self, runner: Runner) -> None:
        with self._lock:
            self.runner = runner
            how = self._requested
        if how is not None:
            _apply(runner, how)

    def _build_runner(self) -> Runner:
        from ..model.job import new_worker_id

        worker_id = new_worker_id()
        self._send(f"w {worker_id}\n".encode())
        return self.runner_factory(self.pool, self.worker, worker_id=worker_id,
                                   on_tick=self.tick, parent_alive=self.parent_alive,
                                   orphans=self.orphans, on_claim=self.claimed)

    # -- reports to the parent ---------------------------------------------------------------

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def tick(self) -> None:
        """A loop pass reached the database: tell the parent (at most every TICK_INTERVAL)."""
        now = time.monotonic()
        if now - self._last_tick < TICK_INTERVAL:
            return
        self._last_tick = now
        self._send(b"t\n")

    def claimed(self) -> None:
        """The worker claimed its first job: tell the parent once (this child made progress,
        so its death is not a boot failure and its restart is not backed off)."""
        if not self._claimed:
            self._claimed = True
            self._send(b"j\n")

    def _send(self, message: bytes) -> None:
        try:
            os.write(self._tick_fd, message)
        except (BlockingIOError, BrokenPipeError):
            pass  # a full pipe drops a tick; a closed one means the parent is gone


def _note_signal(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do; the C handler already wrote the wake-up fd."""


def _apply(runner: Runner, how: str) -> None:
    if how == "now":
        runner.stop_now()
    else:
        runner.stop()
