"""One child process: built in the supervisor before the fork, a process after it.

``Child.__init__`` only stores what the child needs. ``Child.start`` runs in the forked process:
it resets the parent's signal handlers, closes the parent's descriptors, asks to be signalled if
the parent dies, drops the inherited database engine, and runs a ``Worker`` (one queue) or the
maintenance loop, reporting to the parent over a pipe:

    ``w <worker id>\\n``  first, before any claim: the lease owner name of this process;
    ``t\\n``              a tick after a loop pass that reached the database (the heartbeat).

Signals in the child: TERM, INT and HUP drain (stop claiming, let in-flight jobs finish within
drain_timeout, release the rest), any number of times, once; QUIT stops at once (in-flight jobs
released); USR2 dumps every thread's stack to stderr. Signal handlers only note the signal: a
watcher thread reads the wake-up pipe and calls ``stop()`` so no lock is ever taken inside a
handler.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from . import oslayer
from .config import WorkerType
from .errors import first_line
from .orphans import Released, release_orphans

log = logging.getLogger("workerpool.child")

FAULT_ENV = "WORKERPOOL_FAULT"  # test builds: "crash_at_boot:<worker>"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_NOW_SIGNALS = (signal.SIGQUIT,)
DUMP_SIGNAL = signal.SIGUSR2
EXIT_CRASHED = 1
#: Ticks are sent at most this often (seconds); the parent touches files at most once a second.
TICK_INTERVAL = 0.25


class Runner(Protocol):
    def run(self) -> int: ...
    def stop(self) -> None: ...
    def stop_now(self) -> None: ...


class BootFault(RuntimeError):
    """Injected by $WORKERPOOL_FAULT=crash_at_boot:<worker> (tests of the restart backoff)."""


class Child:
    """What the supervisor forks for one worker type."""

    def __init__(self, pool: Any, worker: WorkerType, *, parent_pid: int,
                 orphans: tuple[str, ...] = (), close_fds: tuple[int, ...] = ()) -> None:
        self.pool = pool
        self.worker = worker
        self.parent_pid = parent_pid
        self.orphans = orphans
        self.close_fds = close_fds
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
            return oslayer.EXIT_BOOT_FAILED
        self._attach(runner)
        try:
            return runner.run()
        except Exception:
            log.exception("%s crashed", self.worker.name,
                          extra={"event": "child_crashed", "worker": self.worker.name})
            return EXIT_CRASHED

    def _become_process(self) -> None:
        shed_parent_state(f"workerpool: {self.worker.name}", self.close_fds)
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
        from .jobs import new_worker_id

        fault = os.environ.get(FAULT_ENV, "")
        if fault == f"crash_at_boot:{self.worker.name}":
            raise BootFault(f"{FAULT_ENV}={fault}")
        worker_id = new_worker_id()
        self._send(f"w {worker_id}\n".encode())
        if self.worker.kind == "maintenance":
            return MaintenanceLoop(self.pool, worker_id=worker_id, on_tick=self.tick,
                                   parent_alive=self.parent_alive)
        from .worker import Worker

        return Worker(self.pool, self.worker.name, worker_id=worker_id, on_tick=self.tick,
                      parent_alive=self.parent_alive, orphans=self.orphans)

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


class MaintenanceLoop:
    """The maintenance child: ``run_pass()`` every ``interval`` seconds, a tick after each."""

    def __init__(self, pool: Any, *, worker_id: str, on_tick: Callable[[], None],
                 parent_alive: Callable[[], bool]) -> None:
        from .maintenance import Maintenance  # type: ignore[import-not-found]

        self.maintenance = Maintenance(pool, worker_id=worker_id)
        self.on_tick = on_tick
        self.parent_alive = parent_alive
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    stop_now = stop

    def run(self) -> int:
        import psycopg
        from sqlalchemy.exc import DBAPIError, OperationalError

        log.info("maintenance started", extra={"event": "worker_started", "worker": "maintenance"})
        while not self._stopping.is_set():
            try:
                self.maintenance.run_pass()
                self.on_tick()
            except (OperationalError, DBAPIError, psycopg.Error) as exc:
                log.warning("maintenance pass failed (%s)", type(exc).__name__,
                            extra={"event": "database_error", "worker": "maintenance"})
            if not self.parent_alive():
                log.warning("parent is gone; stopping", extra={"event": "parent_gone"})
                break
            self._stopping.wait(self.maintenance.interval)
        try:
            self.maintenance.close()  # leave the workers registry on a clean stop
        except (OperationalError, DBAPIError, psycopg.Error):
            pass  # the row is pruned after worker_ttl anyway
        log.info("maintenance stopped", extra={"event": "worker_stopped", "worker": "maintenance"})
        return 0


# -- the releaser ------------------------------------------------------------------------------

#: The releaser's limits: it must be done well inside the supervisor's RELEASE_MARGIN.
RELEASER_CONNECT_TIMEOUT = 2  # whole seconds (libpq)
RELEASER_STATEMENT_TIMEOUT = 2.0
EXIT_RELEASE_FAILED = 1


class Releaser:
    """Forked once as the supervisor exits, if children died during shutdown holding claims.

    Releases every row still ``processing`` under the given worker ids (``pending`` with the
    attempt spent, or ``dead/abandoned`` when exhausted, each with a ``WorkerLost`` entry) in one
    bounded transaction, reports ``r <rows>\\n`` to the parent, and exits 0 (1 on a database
    error). No heartbeat file, no signal handling beyond the defaults: the parent SIGKILLs it at
    its deadline.
    """

    def __init__(self, pool: Any, worker_ids: tuple[str, ...], *, parent_pid: int,
                 close_fds: tuple[int, ...] = ()) -> None:
        self.pool = pool
        self.worker_ids = worker_ids
        self.parent_pid = parent_pid
        self.close_fds = close_fds

    def start(self, report_fd: int) -> int:
        """Become the releaser process; return its exit code."""
        self._become_process()
        try:
            released = self._release()
        except Exception as exc:  # database down, timeout: the stale arm takes them later
            log.warning("releaser could not release %d dead worker(s): %s", len(self.worker_ids),
                        first_line(exc), extra={"event": "releaser_error"})
            return EXIT_RELEASE_FAILED
        with contextlib.suppress(OSError):
            os.write(report_fd, f"r {released.rows}\n".encode())
        self._report_dead(released.dead)
        return 0

    def _become_process(self) -> None:
        shed_parent_state("workerpool: releaser", self.close_fds)
        oslayer.set_parent_death_signal(signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, oslayer.HANDLED_SIGNALS)
        self.pool.forget_engine()

    def _release(self) -> Released:
        from . import db, queries

        engine = db.create(self.pool.url, application_name="workerpool releaser", pool_size=1,
                           connect_timeout=RELEASER_CONNECT_TIMEOUT)
        try:
            with engine.begin() as conn:
                queries.bound_transaction(conn, statement_timeout=RELEASER_STATEMENT_TIMEOUT,
                                          lock_timeout=RELEASER_STATEMENT_TIMEOUT,
                                          idle_timeout=RELEASER_STATEMENT_TIMEOUT)
                released = release_orphans(conn, self.worker_ids)
        finally:
            engine.dispose()
        return released

    def _report_dead(self, dead: list[Any]) -> None:
        """Exhausted rows went dead/abandoned: logged once at error level, on_dead hooks run."""
        from .dead import report_dead

        try:
            report_dead(self.pool, dead)
        except Exception:
            log.exception("reporting dead jobs failed", extra={"event": "report_dead_failed"})


def shed_parent_state(title: str, close_fds: tuple[int, ...]) -> None:
    """Right after the fork: a title of its own, default signal handling, none of the
    parent's descriptors (its wakeup pipe, the other children's pipes)."""
    oslayer.set_title(title)
    for signum in oslayer.HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
