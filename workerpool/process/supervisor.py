"""The supervisor: the parent process of `workerpool run`.

Single-threaded, no database connection, never runs a job. It forks one child per worker type
(queue, plus ``maintenance``), reads their progress ticks, touches their heartbeat files, reaps
and replaces children that exit, kills children that stop ticking, and drains them all on
SIGTERM. Signal handlers only record the signal; the main loop does the work, one named step at a
time.

A worker type's life (supervisord's state machine)::

    BACKOFF --spawn--> STARTING --first tick--> RUNNING
       ^                   |                       |
       +----- exited ------+-----------------------+     (restart delay grows on fast failures)
    STARTING --exited, boot_retries times in a row--> FATAL  (the supervisor drains, exits 3)
    STARTING/RUNNING --SIGTERM sent--> STOPPING --exited--> EXITED

Before it exits, the parent forks one short-lived ``releaser`` child if claims would otherwise
stay leased until ``stale_after``: the worker ids of queue children that died during shutdown
without draining (SIGKILLed at the deadline, crashed, FATAL) and orphans no replacement took.
It waits for it at most ``release_margin`` seconds, then SIGKILLs it and exits anyway
(:mod:`.releaser`). Each slot's own bookkeeping lives in :mod:`.slots`; what the children say,
in :mod:`.pipe`. What a child and the releaser run is handed in as factories (``workerpool run``
builds them): this module imports no database code.
"""

from __future__ import annotations

import logging
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..model import exitcodes, metrics
from ..model.errors import ConfigError
from ..model.states import ChildState, SupervisorMood
from . import heartbeat, pipe
from .exporter import Exporter
from .oslayer import RealOS, describe_status, set_title
from .releaser import ExitRelease, unreleased
from .settings import RunSettings, heartbeat_base
from .slots import LIVE, SERVING, Slot, restart_cause, restart_delay

log = logging.getLogger("workerpool.supervisor")

#: Seconds between the stack-dump signal and SIGKILL for a hung child.
DUMP_GRACE = 0.5
#: After SIGKILL at the deadline, how long to wait for the kernel before giving up on a child.
KILL_WAIT = 5.0
#: Longest sleep of the main loop (seconds): it also keeps supervisor.heartbeat fresh.
MAX_WAIT = 0.5
DUMP_SIGNAL = signal.SIGUSR2

ChildFactory = Callable[..., Any]


class Supervisor:
    """Keeps one child per worker type alive until told to stop."""

    def __init__(
        self,
        settings: RunSettings,
        *,
        child_factory: ChildFactory,
        releaser_factory: ChildFactory,
        os_layer: Any = None,
    ) -> None:
        self.settings = settings
        self.os = os_layer or RealOS()
        #: ``child_factory(worker_type, *, parent_pid, orphans, close_fds)``: a
        #: :class:`~.child.Child` (built before the fork; its ``start`` runs after it).
        self.child_factory = child_factory
        #: ``releaser_factory(worker_ids, *, parent_pid, close_fds)``: a
        #: :class:`~.releaser.Releaser`.
        self.releaser_factory = releaser_factory
        self.release: ExitRelease | None = None
        self.slots = [Slot(worker) for worker in settings.workers]
        self.mood = SupervisorMood.RUNNING
        self.deadline: float | None = None
        self.exit_code = exitcodes.OK
        self._signals: deque[int] = deque()
        self._own_touch = float("-inf")
        self._touch_failed_at = float("-inf")
        self._forced_exit_at: float | None = None
        self.exporter: Any = None  # an Exporter with --metrics-port
        self._claim: heartbeat.Claim | None = None

    # -- entry point ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until every child is gone after a stop signal; return the exit code."""
        set_title("workerpool: supervisor")
        self._claim_heartbeat_dir()  # first: the exporter reads the directory it settles on
        self._start_metrics()  # a taken port is refused here, before any fork
        self.os.install_signals(self.on_signal)
        try:
            self.start()
            while (code := self.step()) is None:
                pass
            return code
        finally:
            self.os.restore_signals()
            if self.exporter is not None:
                self.exporter.close()

    def _start_metrics(self) -> None:
        if self.settings.metrics_port is not None:  # ConfigError if the port cannot be had
            self.exporter = Exporter.start_for(self.settings)

    def on_signal(self, signum: int, frame: object = None) -> None:
        """The signal handler: record, nothing else (the main loop acts on it)."""
        self._signals.append(signum)

    def start(self) -> None:
        if self._claim is None:
            self._claim_heartbeat_dir()
        removed = heartbeat.remove_all(self.settings.heartbeat_dir)
        self._touch_own_heartbeat()
        self._touch_every_child_file()
        log.info(
            "supervisor started pid=%d workers=%s heartbeat_dir=%s drain=%gs%s",
            self.os.getpid(),
            ",".join(s.name for s in self.slots),
            self.settings.heartbeat_dir,
            self.settings.drain_timeout,
            f" (removed old heartbeats: {','.join(removed)})" if removed else "",
            extra={"event": "supervisor_started"},
        )

    def step(self) -> int | None:
        """One pass of the main loop. Returns the exit code once everything has stopped."""
        ready = self.os.wait(self._watched_fds(), self._wait_timeout())
        self._read_reports(ready)
        self._dispatch_signals()
        self._reap_children()
        self._murder_hung_children()
        self._enforce_deadline()
        self._spawn_due_children()
        self._touch_own_heartbeat()
        return self._finished()

    # -- signals -------------------------------------------------------------------------------

    def _dispatch_signals(self) -> None:
        while self._signals:
            signum = self._signals.popleft()
            name = signal.Signals(signum).name.lower()  # sigterm -> handle_term
            getattr(self, f"handle_{name[3:]}", self.handle_other)(signum)

    def handle_term(self, signum: int = signal.SIGTERM) -> None:
        """Drain: forward SIGTERM to every child once, wait up to drain + margin."""
        if self.mood is SupervisorMood.RUNNING:
            self._begin_drain(signal.Signals(signum).name)

    handle_hup = handle_term

    def handle_int(self, signum: int = signal.SIGINT) -> None:
        """First SIGINT drains, a second one stops at once."""
        if self.mood is SupervisorMood.RUNNING:
            self._begin_drain("SIGINT")
        elif self.mood is SupervisorMood.DRAINING:
            self._stop_now("second SIGINT")

    def handle_quit(self, signum: int = signal.SIGQUIT) -> None:
        """Stop at once: children release their jobs and exit without draining."""
        if self.mood is not SupervisorMood.STOPPING_NOW:
            self._stop_now("SIGQUIT")

    def handle_chld(self, signum: int = signal.SIGCHLD) -> None:
        """Nothing to do here: every pass reaps."""

    def handle_other(self, signum: int) -> None:
        log.debug("ignored signal %s", signum, extra={"event": "signal_ignored"})

    def _begin_drain(self, reason: str) -> None:
        now = self.os.monotonic()
        self.mood = SupervisorMood.DRAINING  # RUNNING -> DRAINING
        self.deadline = now + self.settings.drain_timeout + self.settings.drain_margin
        live = self._live_slots()
        log.info(
            "drain started (%s): SIGTERM to %d child(ren), deadline in %gs",
            reason,
            len(live),
            self.deadline - now,
            extra={"event": "drain_started"},
        )
        self._stop_children(SERVING, signal.SIGTERM)

    def _stop_now(self, reason: str) -> None:
        now = self.os.monotonic()
        self.mood = SupervisorMood.STOPPING_NOW  # * -> STOPPING_NOW
        self.deadline = now + self.settings.drain_margin
        log.warning(
            "stopping now (%s): SIGQUIT to every child", reason, extra={"event": "stop_now"}
        )
        self._stop_children(LIVE, signal.SIGQUIT)

    def _stop_children(self, states: tuple[ChildState, ...], signum: int) -> None:
        for slot in self.slots:
            if slot.state in states:
                slot.state = ChildState.STOPPING  # -> STOPPING
                self.os.kill(slot.pid, signum)
            elif slot.state is ChildState.BACKOFF:
                slot.state = ChildState.EXITED  # BACKOFF -> EXITED: not restarted

    # -- reports from the children -------------------------------------------------------------

    def _watched_fds(self) -> list[int]:
        fds = [slot.fd for slot in self.slots if slot.fd is not None]
        if self.release is not None and self.release.fd is not None:
            fds.append(self.release.fd)
        return fds

    def _read_reports(self, ready: list[int]) -> None:
        for slot in self.slots:
            if slot.fd is not None and slot.fd in ready:
                self._read_pipe(slot)
        if self.release is not None and self.release.fd is not None and self.release.fd in ready:
            self.release.read(self.os)

    def _read_pipe(self, slot: Slot) -> None:
        self._handle_reports(slot, pipe.read(self.os, slot))

    def _handle_reports(self, slot: Slot, messages: list[pipe.Message]) -> None:
        for message in messages:
            match message:
                case pipe.Started(worker_id):
                    slot.worker_id = worker_id
                case pipe.Tick():
                    self._ticked(slot)
                case pipe.Claimed():
                    slot.claimed = True

    def _ticked(self, slot: Slot) -> None:
        now = self.os.monotonic()
        if slot.tick(now):  # STARTING -> RUNNING
            log.info(
                "child running worker=%s pid=%d",
                slot.name,
                slot.pid,
                extra={"event": "child_running", "worker": slot.name, "pid": slot.pid},
            )
        if slot.heartbeat_due(now):
            self._touch(heartbeat.path_for(self.settings.heartbeat_dir, slot.name))

    # -- reaping -------------------------------------------------------------------------------

    def _reap_children(self) -> None:
        for pid, status in self.os.reap():
            if self.release is not None and pid == self.release.pid:
                self.release.exited(self.os, status)
                continue
            slot = next((s for s in self.slots if s.pid == pid and s.state in LIVE), None)
            if slot is None:  # we may be PID 1: orphans of the container get reaped here too
                log.debug(
                    "reaped unknown pid=%d status=%s",
                    pid,
                    describe_status(status),
                    extra={"event": "unknown_child_reaped", "pid": pid},
                )
                continue
            self._child_exited(slot, status)

    def _child_exited(self, slot: Slot, status: int) -> None:
        self._handle_reports(slot, pipe.close(self.os, slot))  # its Started may be in there
        self._log_exit(slot, status)
        if self.exporter is not None:
            self.exporter.child_exited(slot.pid)
        cause = restart_cause(slot, status)
        slot.reaped(
            drained=self.mood is not SupervisorMood.RUNNING and describe_status(status) == "exit:0"
        )
        if self.mood is not SupervisorMood.RUNNING or slot.state is ChildState.STOPPING:
            slot.state = ChildState.EXITED  # STOPPING -> EXITED
            return
        self._schedule_restart(
            slot, failed_boot=not slot.ticked, cause=cause, status=describe_status(status)
        )
        if slot.state is ChildState.BACKOFF:
            metrics.record.restarted(slot.name, cause)

    def _log_exit(self, slot: Slot, status: int) -> None:
        text = describe_status(status)
        level = logging.INFO
        if slot.state is not ChildState.STOPPING:
            level = logging.ERROR if "SIGKILL" in text and not slot.killed else logging.WARNING
        hint = (
            " (not sent by the supervisor: possibly the OOM killer)"
            if ("SIGKILL" in text and not slot.killed)
            else ""
        )
        log.log(
            level,
            "child exited worker=%s pid=%d status=%s%s",
            slot.name,
            slot.pid,
            text,
            hint,
            extra={"event": "child_exited", "worker": slot.name, "pid": slot.pid, "status": text},
        )

    def _schedule_restart(
        self, slot: Slot, *, failed_boot: bool, cause: str = "exit", status: str = ""
    ) -> None:
        now = self.os.monotonic()
        slot.count_exit(now, failed_boot=failed_boot)
        if slot.boot_failures >= self.settings.boot_retries:
            slot.state = ChildState.FATAL  # STARTING -> FATAL
            log.error(
                "worker=%s failed to start %d times in a row; giving up",
                slot.name,
                slot.boot_failures,
                extra={"event": "worker_fatal", "worker": slot.name},
            )
            self.exit_code = exitcodes.BOOT_FAILED
            self._begin_drain(f"{slot.name} cannot start")
            return
        delay = restart_delay(slot.crashes, self.settings.restart_delay)
        slot.state, slot.restart_at = ChildState.BACKOFF, now + delay  # -> BACKOFF
        # fast_exits: the exits in a row that back-off counts (a child that ran long enough, or
        # claimed jobs, starts it again), so a kill -9 of a busy child is 0 there: the line
        # names what happened by its cause and status instead
        log.info(
            "restart scheduled worker=%s cause=%s status=%s delay=%.2fs fast_exits=%d "
            "boot_failures=%d",
            slot.name,
            cause,
            status,
            delay,
            slot.crashes,
            slot.boot_failures,
            extra={
                "event": "restart_scheduled",
                "worker": slot.name,
                "delay": delay,
                "cause": cause,
            },
        )

    # -- hung children -------------------------------------------------------------------------

    def _murder_hung_children(self) -> None:
        if self.mood is not SupervisorMood.RUNNING:
            return
        now = self.os.monotonic()
        for slot in self.slots:
            if slot.state not in SERVING:
                continue
            if slot.kill_at is not None:
                if now >= slot.kill_at and not slot.killed:
                    self._kill(slot, "hang_killed")
            elif now - slot.last_tick > slot.worker.hang_timeout:
                self._dump_stack(slot, now)

    def _dump_stack(self, slot: Slot, now: float) -> None:
        log.error(
            "hang detected worker=%s pid=%d silent=%.1fs hang_timeout=%gs: "
            "dumping its stack, then SIGKILL",
            slot.name,
            slot.pid,
            now - slot.last_tick,
            slot.worker.hang_timeout,
            extra={"event": "hang_detected", "worker": slot.name, "pid": slot.pid},
        )
        self.os.kill(slot.pid, DUMP_SIGNAL)
        slot.kill_at = now + DUMP_GRACE

    def _kill(self, slot: Slot, event: str) -> None:
        log.error(
            "SIGKILL worker=%s pid=%d (%s)",
            slot.name,
            slot.pid,
            event.replace("_", " "),
            extra={"event": event, "worker": slot.name, "pid": slot.pid},
        )
        slot.killed = True
        self.os.kill(slot.pid, signal.SIGKILL)

    # -- shutdown deadline ---------------------------------------------------------------------

    def _enforce_deadline(self) -> None:
        if self.deadline is None or self.os.monotonic() < self.deadline:
            return
        for slot in self._live_slots():
            if not slot.killed:
                self._kill(slot, "killed_at_deadline")
        self.deadline = None  # escalate once
        self._forced_exit_at = self.os.monotonic() + KILL_WAIT

    # -- spawning ------------------------------------------------------------------------------

    def _spawn_due_children(self) -> None:
        if self.mood is not SupervisorMood.RUNNING:
            return
        now = self.os.monotonic()
        for slot in self.slots:
            if slot.state is ChildState.BACKOFF and now >= slot.restart_at:
                self._spawn(slot, now)

    def _spawn(self, slot: Slot, now: float) -> None:
        others = tuple(s.fd for s in self.slots if s.fd is not None)
        child = self.child_factory(
            slot.worker,
            parent_pid=self.os.getpid(),
            orphans=tuple(slot.orphans),
            close_fds=others + self._own_fds(),
        )
        try:
            pid, fd = self.os.spawn(child.start)
        except OSError as exc:
            log.error("fork failed worker=%s: %s", slot.name, exc, extra={"event": "fork_failed"})
            slot.restart_at = now + max(1.0, self.settings.restart_delay)
            return
        slot.spawned(pid, fd, now)  # BACKOFF -> STARTING
        log.info(
            "child started worker=%s pid=%d%s",
            slot.name,
            pid,
            f" releasing {len(slot.given)} dead worker(s)" if slot.given else "",
            extra={"event": "child_started", "worker": slot.name, "pid": pid},
        )

    # -- heartbeat files -----------------------------------------------------------------------

    def _claim_heartbeat_dir(self) -> None:
        """Hold the directory for this process and its children before clearing it: a second
        supervisor given the same one is refused instead of deleting the files we touch."""
        settings = self.settings
        chosen, app, database = settings.heartbeat_dir, settings.app, settings.database
        defaults = heartbeat.default_dirs(heartbeat_base(), app or "", database or "")
        try:
            if chosen in defaults:  # another supervisor may have claimed it since it was chosen
                candidates = defaults[defaults.index(chosen) :]
                self._claim = heartbeat.claim_first_free(candidates, app, database)
            else:  # given: that one, or refused
                self._claim = heartbeat.claim(chosen, app, database)
        except heartbeat.HeartbeatDirError as exc:
            raise ConfigError(str(exc)) from None
        if self._claim.directory != chosen:
            self.settings = replace(settings, heartbeat_dir=self._claim.directory)

    def _touch_own_heartbeat(self) -> None:
        now = self.os.monotonic()
        if now - self._own_touch >= heartbeat.HEARTBEAT_PERIOD:
            self._own_touch = now
            self._touch(heartbeat.path_for(self.settings.heartbeat_dir, heartbeat.SUPERVISOR))

    def _touch_every_child_file(self) -> None:
        """A file for each child from the start, aging until its first tick: a child that never
        reaches the database goes stale like a hung one instead of having no file to judge."""
        for slot in self.slots:
            self._touch(heartbeat.path_for(self.settings.heartbeat_dir, slot.name))

    def _touch(self, path: Any) -> None:
        try:
            self.os.touch(path)
        except OSError as exc:  # not fatal, but visible (at most once a minute)
            now = self.os.monotonic()
            if now - self._touch_failed_at >= 60:
                self._touch_failed_at = now
                log.warning(
                    "cannot touch %s: %s", path, exc, extra={"event": "heartbeat_write_failed"}
                )

    # -- bookkeeping ---------------------------------------------------------------------------

    def _own_fds(self) -> tuple[int, ...]:
        """The parent's descriptors a forked child closes: wake-up pipe, metrics socket, the
        heartbeat directory's lock (orphans outliving a killed parent must not keep a new
        supervisor out of a directory nobody touches any more)."""
        claim = (self._claim.fd,) if self._claim is not None and self._claim.fd is not None else ()
        return tuple(self.os.own_fds()) + (self.exporter.fds() if self.exporter else ()) + claim

    def _live_slots(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.state in LIVE]

    def _wait_timeout(self) -> float:
        now = self.os.monotonic()
        moments = [now + MAX_WAIT]
        moments += [s.restart_at for s in self.slots if s.state is ChildState.BACKOFF]
        moments += [s.kill_at for s in self.slots if s.kill_at is not None and not s.killed]
        if self.mood is SupervisorMood.RUNNING:
            moments += [
                s.last_tick + s.worker.hang_timeout
                for s in self.slots
                if s.state in SERVING and s.kill_at is None
            ]
        moments += [t for t in (self.deadline, self._forced_exit_at) if t is not None]
        if self.release is not None and not self.release.done:
            moments.append(self.release.deadline)
        return max(0.0, min(moments) - now)

    def _finished(self) -> int | None:
        if self.mood is SupervisorMood.RUNNING:
            return None
        live = self._live_slots()
        if live and (self._forced_exit_at is None or self.os.monotonic() < self._forced_exit_at):
            return None
        if self.release is None:  # every child is gone (or unkillable): once
            for slot in live:
                log.error(
                    "worker=%s pid=%d did not die after SIGKILL; leaving it",
                    slot.name,
                    slot.pid,
                    extra={"event": "child_unkillable", "worker": slot.name, "pid": slot.pid},
                )
            self._start_releaser()
        if not self.release.finished(self.os):
            return None
        log.info(
            "drain finished: supervisor exiting with %d",
            self.exit_code,
            extra={"event": "drain_finished"},
        )
        return self.exit_code

    # -- the releaser at exit ------------------------------------------------------------------

    def _start_releaser(self) -> None:
        self.release = release = ExitRelease(unreleased(self.slots))
        if not release.worker_ids:
            release.done = True
            return
        releaser = self.releaser_factory(
            release.worker_ids,
            parent_pid=self.os.getpid(),
            close_fds=tuple(self._watched_fds()) + self._own_fds(),
        )
        if release.spawn(self.os, releaser, self.settings.release_margin):
            for slot in self.slots:
                slot.orphans = []  # handed over
