"""One child process: built in the supervisor before the fork, a process after it.

``Child.__init__`` only stores what the child needs. ``Child.start`` runs in the forked process:
it resets the parent's signal handlers, closes the parent's descriptors, asks to be signalled if
the parent dies, drops what the parent held (``after_fork``: the application's engine), and runs
what its ``runner_factory`` builds (a queue's worker, or the maintenance loop:
:func:`workerpool.runtime.runners.build_runner`, handed in by whoever builds the supervisor),
reporting to the parent over its pipe (:mod:`.pipe`): ``Started`` first, before any claim, then a
``Tick`` after each loop pass that reached the database, and ``Claimed`` once.

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
from typing import Protocol

from ..model import exitcodes, tracing
from ..model.job import new_worker_id
from ..model.specs import WorkerType
from . import oslayer, pipe

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


#: Builds what a child runs, in the child after the fork: ``(worker_type, *, worker_id,
#: on_tick, parent_alive, orphans, on_claim) -> Runner``.
RunnerFactory = Callable[..., Runner]


class Child:
    """What the supervisor forks for one worker type."""

    def __init__(
        self,
        worker: WorkerType,
        *,
        runner_factory: RunnerFactory,
        parent_pid: int,
        orphans: tuple[str, ...] = (),
        close_fds: tuple[int, ...] = (),
        after_fork: Callable[[], None] = lambda: None,
    ) -> None:
        self.worker = worker
        self.after_fork = after_fork
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
            log.exception(
                "%s could not start",
                self.worker.name,
                extra={"event": "child_boot_failed", "worker": self.worker.name},
            )
            return exitcodes.BOOT_FAILED
        self._attach(runner)
        try:
            return runner.run()
        except Exception:
            log.exception(
                "%s crashed",
                self.worker.name,
                extra={"event": "child_crashed", "worker": self.worker.name},
            )
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
        self.after_fork()  # the application's engine came over the fork: never use it

    def _watch_signals(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        for signum in STOP_SIGNALS + STOP_NOW_SIGNALS:
            signal.signal(signum, _note_signal)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(
            target=self._signal_watcher, args=(read_fd,), name="signals", daemon=True
        ).start()

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
            log.info(
                "signal received worker=%s signal=%s: %s",
                self.worker.name,
                oslayer.signal_name(signum),
                "stopping now" if how == "now" else "draining",
                extra={"event": "child_stopping", "worker": self.worker.name},
            )
        if runner is not None:
            _apply(runner, how)

    def _attach(self, runner: Runner) -> None:
        with self._lock:
            self.runner = runner
            how = self._requested
        if how is not None:
            _apply(runner, how)

    def _build_runner(self) -> Runner:
        worker_id = new_worker_id()
        pipe.send(self._tick_fd, pipe.Started(worker_id))
        return self.runner_factory(
            self.worker,
            worker_id=worker_id,
            on_tick=self.tick,
            parent_alive=self.parent_alive,
            orphans=self.orphans,
            on_claim=self.claimed,
        )

    # -- reports to the parent ---------------------------------------------------------------

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def tick(self) -> None:
        """A loop pass reached the database: tell the parent (at most every TICK_INTERVAL)."""
        now = time.monotonic()
        if now - self._last_tick < TICK_INTERVAL:
            return
        self._last_tick = now
        pipe.send(self._tick_fd, pipe.TICK)

    def claimed(self) -> None:
        """The worker claimed its first job: tell the parent once (this child made progress,
        so its death is not a boot failure and its restart is not backed off)."""
        if not self._claimed:
            self._claimed = True
            pipe.send(self._tick_fd, pipe.CLAIMED)


def _note_signal(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do; the C handler already wrote the wake-up fd."""


def _apply(runner: Runner, how: str) -> None:
    if how == "now":
        runner.stop_now()
    else:
        runner.stop()
