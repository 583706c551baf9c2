"""The worker runtime: what one child process does between claim and outcome.

One ``Worker`` serves one queue. Its main loop (the thread that calls :meth:`Worker.run`) is the
only thread that claims, renews and records outcomes; handlers run on a thread pool of
``concurrency`` threads and hand their outcomes back through a queue. No transaction is ever
open while a handler runs: every database call is its own short transaction.

Each pass of the main loop:
  1. renews leases that are due (before anything else after a database outage),
  2. writes finished outcomes in one batch,
  3. fails jobs that overran their ``timeout``,
  4. claims as many jobs as there are free slots,
  5. reports a tick (the heartbeat) if the pass reached the database,
  6. waits for a notification, a finished job, a stop request or the poll interval.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue as queue_module
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError

from . import queries
from .errors import LeaseLost
from .jobs import Job, new_worker_id
from .outcome import FAIL, Outcome, classify, error_entry, interrupted, record_many
from .payload import dumps
from .pool import QueueSpec, TaskSpec, WorkerPool

log = logging.getLogger("workerpool.worker")

#: Exit codes: the contract between a child and the supervisor.
EXIT_OK = 0
EXIT_RECYCLE = 75  # a handler ignored its timeout: restart me

FAULT_ENV = "WORKERPOOL_FAULT"  # test builds: "no_lease_renewal"
RECYCLE_GRACE = 5.0  # seconds a timed-out handler gets before the child is recycled
RECONNECT_MAX = 5.0


@dataclass
class InFlight:
    """A claimed job this process is running."""

    lease: queries.Lease
    spec: TaskSpec
    started: float  # monotonic
    deadline: float | None  # monotonic; None when the task has no timeout
    timed_out: bool = False
    lost: bool = False


@dataclass
class Backoff:
    """Capped exponential delay for reconnects (a loop, not a crash loop)."""

    delay: float = 0.0
    failures: int = 0

    def failed(self) -> float:
        self.failures += 1
        self.delay = min(RECONNECT_MAX, 0.1 * 2 ** min(self.failures, 10))
        return self.delay

    def succeeded(self) -> None:
        self.failures, self.delay = 0, 0.0


@dataclass
class Counters:
    claimed: int = 0
    finished: int = 0
    lost: int = 0
    released: int = 0
    db_errors: int = 0
    states: dict[str, int] = field(default_factory=dict)


class Worker:
    """Claims and runs the jobs of one queue until asked to stop, then drains."""

    def __init__(
        self,
        pool: WorkerPool,
        queue: str,
        *,
        worker_id: str | None = None,
        on_tick: Callable[[], None] | None = None,
        parent_alive: Callable[[], bool] | None = None,
        orphans: tuple[str, ...] = (),
    ) -> None:
        self.pool = pool
        self.spec: QueueSpec = pool.queue_spec(queue)
        self.queue = queue
        self.id = worker_id or new_worker_id()
        self.on_tick = on_tick or (lambda: None)
        self.parent_alive = parent_alive or (lambda: True)
        self.orphans = list(orphans)
        self.task_versions = pool.task_versions(queue)
        self.stale_after = pool.stale_after(queue)
        self.renew_every = self.stale_after / 3
        self.renew_leases = os.environ.get(FAULT_ENV, "") != "no_lease_renewal"
        self.counters = Counters()
        self._in_flight: dict[int, InFlight] = {}
        self._results: queue_module.SimpleQueue[tuple[queries.Lease, Outcome | None]] = (
            queue_module.SimpleQueue()
        )
        self._unwritten: list[tuple[queries.Lease, Outcome]] = []
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stop_now = threading.Event()
        self._recycle = False
        self._db = Backoff()
        self._last_renew = time.monotonic()
        self._registered = False
        self._executor = ThreadPoolExecutor(self.spec.concurrency, thread_name_prefix=queue)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._listener: Listener | None = None

    # -- control (thread- and signal-safe) -----------------------------------------------------

    def stop(self) -> None:
        """Stop claiming and drain (idempotent: a second call changes nothing)."""
        self._stopping.set()
        self._wake.set()

    def stop_now(self) -> None:
        """Stop without waiting for in-flight jobs; they are released."""
        self._stop_now.set()
        self.stop()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    # -- the main loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; drain; return the exit code for the supervisor."""
        log.info("worker started", extra={"event": "worker_started", "queue": self.queue,
                                          "worker": self.id})
        self._start_listener()
        try:
            while not self._stopping.is_set():
                self._pass()
                if not self.parent_alive():
                    log.warning("parent is gone; draining", extra={"event": "parent_gone"})
                    self.stop()
                    break
                self._wait()
            self._drain()
        finally:
            self._shutdown()
        return EXIT_RECYCLE if self._recycle else EXIT_OK

    def _pass(self) -> None:
        try:
            self._boot_once()
            self._renew_if_due()
            self._write_outcomes()
            self._enforce_timeouts()
            if not self._recycle:
                self._claim()
            self._db.succeeded()
        except (OperationalError, DBAPIError, psycopg.Error) as exc:
            self._database_failed(exc)
            return
        self.on_tick()

    def _wait(self) -> None:
        delay = self._db.delay or self.spec.poll_interval
        if self._next_deadline() is not None:
            delay = min(delay, max(0.0, self._next_deadline() - time.monotonic()))
        self._wake.wait(delay)
        self._wake.clear()

    def _database_failed(self, exc: BaseException) -> None:
        self.counters.db_errors += 1
        delay = self._db.failed()
        log.warning("database call failed (%s: %s); retrying in %.1fs", type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "", delay,
                    extra={"event": "database_error", "queue": self.queue})
        # After an outage, renew leases before claiming anything new.
        self._last_renew = 0.0

    # -- steps ------------------------------------------------------------------------------------

    def _boot_once(self) -> None:
        """Register this process and release the claims of the predecessors it replaces."""
        if self._registered:
            return
        with self.pool.engine.begin() as conn:
            queries.register_worker(conn, self.id, host=socket.gethostname(), pid=os.getpid(),
                                    queue=self.queue, tasks=self.task_versions)
            for dead in self.orphans:
                self._release_orphan(conn, dead)
        self.orphans.clear()
        self._registered = True

    def _release_orphan(self, conn: Any, dead: str) -> None:
        entry = {"type": "WorkerLost", "worker": dead,
                 "message": f"worker {dead} died while running this job"}
        rows = queries.release_worker(conn, dead, entry)
        if rows:
            log.warning("released %d job(s) of dead worker %s", len(rows), dead,
                        extra={"event": "orphans_released", "worker": dead, "count": len(rows)})
        queries.unregister_worker(conn, dead)
        self._report_dead([r for r in rows if r.state == "dead"], "abandoned")

    def _renew_if_due(self) -> None:
        now = time.monotonic()
        if now - self._last_renew < self.renew_every:
            return
        held = [f for f in self._in_flight.values() if not f.timed_out and not f.lost]
        if held and self.renew_leases:
            leases = [(f.lease.job_id, f.lease.attempt) for f in held]
            with self.pool.engine.begin() as conn:
                renewed = queries.renew(conn, self.id, leases)
                queries.beat_worker(conn, self.id)
            self._mark_lost(f for f in held if f.lease.job_id not in renewed)
        elif self._registered:
            with self.pool.engine.begin() as conn:
                if not queries.beat_worker(conn, self.id):
                    self._registered = False  # pruned: register again next pass
        self._last_renew = now

    def _mark_lost(self, flights) -> None:
        for flight in flights:
            if not flight.lost:
                flight.lost = True
                self.counters.lost += 1
                log.warning("lease lost on job %s", flight.lease.job_id,
                            extra={"event": "lease_lost", "job_id": flight.lease.job_id})

    def _write_outcomes(self) -> None:
        while True:
            try:
                lease, outcome = self._results.get_nowait()
            except queue_module.Empty:
                break
            if outcome is None:
                self._in_flight.pop(lease.job_id, None)
            else:
                self._unwritten.append((lease, outcome))
        if not self._unwritten:
            return
        batch = self._unwritten
        with self.pool.engine.begin() as conn:
            states = record_many(conn, self.id, batch)
        self._unwritten = []
        for lease, outcome in batch:
            self._finished(lease, outcome, states.get(lease.job_id))

    def _finished(self, lease: queries.Lease, outcome: Outcome, state: str | None) -> None:
        self._in_flight.pop(lease.job_id, None)
        self.counters.finished += 1
        if state is None:
            self.counters.lost += 1
            log.warning("outcome of job %s not written: lease lost", lease.job_id,
                        extra={"event": "outcome_fenced_out", "job_id": lease.job_id})
            return
        self.counters.states[state] = self.counters.states.get(state, 0) + 1
        if state == "dead":
            reason = "permanent" if outcome.kind != FAIL else "exhausted"
            self._report_dead([(lease.job_id, outcome)], reason)

    def _report_dead(self, rows: list[Any], reason: str) -> None:
        for row in rows:
            log.error("job %s gave up (%s)", row[0], reason,
                      extra={"event": "job_dead", "queue": self.queue, "job_id": row[0],
                             "reason": reason})

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for flight in list(self._in_flight.values()):
            if flight.deadline is None or now < flight.deadline:
                continue
            if not flight.timed_out:
                self._time_out(flight)
            elif now >= flight.deadline + RECYCLE_GRACE and not self._recycle:
                log.error("handler of job %s ignores its timeout; recycling this worker",
                          flight.lease.job_id,
                          extra={"event": "worker_recycle", "job_id": flight.lease.job_id})
                self._recycle = True
                self.stop()

    def _time_out(self, flight: InFlight) -> None:
        flight.timed_out = True
        exc = TimeoutError(f"task {flight.spec.name} exceeded its timeout of "
                           f"{flight.spec.timeout:g}s")
        outcome = Outcome(FAIL, error_entry(exc, attempt=flight.lease.attempt, worker=self.id),
                          delay=flight.spec.backoff.delay(flight.lease.attempt))
        with self.pool.engine.begin() as conn:
            states = record_many(conn, self.id, [(flight.lease, outcome)])
        self.counters.states["timeout"] = self.counters.states.get("timeout", 0) + 1
        state = states.get(flight.lease.job_id)
        if state == "dead":
            self._report_dead([(flight.lease.job_id, outcome)], "exhausted")

    def _next_deadline(self) -> float | None:
        deadlines = [f.deadline for f in self._in_flight.values()
                     if f.deadline is not None and not f.timed_out]
        return min(deadlines) if deadlines else None

    def _claim(self) -> None:
        free = self.spec.concurrency - len(self._in_flight)
        if free <= 0 or self._stopping.is_set():
            return
        with self.pool.engine.begin() as conn:
            rows = queries.claim(conn, queue=self.queue, worker=self.id, limit=free,
                                 task_versions=self.task_versions, stale_after=self.stale_after)
        for row in rows:
            self._start(row)
        self.counters.claimed += len(rows)

    def _start(self, row: Any) -> None:
        spec = self.pool.task_spec(row.task)
        lease = queries.Lease(row.id, row.attempts, self.id)
        now = time.monotonic()
        deadline = now + spec.timeout if spec.timeout else None
        self._in_flight[row.id] = InFlight(lease, spec, now, deadline)
        self._executor.submit(self._execute, spec, row, lease)

    # -- handler threads --------------------------------------------------------------------------

    def _execute(self, spec: TaskSpec, row: Any, lease: queries.Lease) -> None:
        try:
            job = self._job(spec, row, lease)
            exc = self._call(spec, job)
        except Exception as setup_error:  # e.g. an upcaster that raised
            exc = setup_error
        flight = self._in_flight.get(lease.job_id)
        if flight is not None and flight.timed_out:
            self._results.put((lease, None))  # its failure was already recorded
        else:
            self._results.put((lease, classify(exc, spec, lease.attempt, self.id)))
        self._wake.set()

    def _job(self, spec: TaskSpec, row: Any, lease: queries.Lease) -> Job:
        payload = spec.upcast(row.payload, row.payload_version)
        job = Job.from_row(row, worker=self.id, saver=self._save_checkpoint)
        return Job(**{**job.__dict__, "payload": payload})

    def _call(self, spec: TaskSpec, job: Job) -> BaseException | None:
        try:
            result = spec.fn(job)
            if asyncio.iscoroutine(result):
                asyncio.run_coroutine_threadsafe(result, self._event_loop()).result()
        except Exception as exc:
            return exc
        return None

    def _save_checkpoint(self, job: Job, data: Any) -> None:
        text = dumps(data, limit=self.pool.payload_limit, what="checkpoint", object_only=False)
        lease = queries.Lease(job.id, job.attempt, self.id)
        with self.pool.engine.begin() as conn:
            if not queries.save_checkpoint(conn, lease, text):
                raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """One event loop thread per worker for ``async def`` handlers (started on first use)."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=loop.run_forever, name="asyncio",
                                                 daemon=True)
            self._loop_thread.start()
            self._loop = loop
        return self._loop

    # -- shutdown ---------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Let in-flight jobs finish within drain_timeout, then release what is left."""
        deadline = time.monotonic() + (0 if self._stop_now.is_set() else self.spec.drain_timeout)
        if self._in_flight:
            log.info("draining %d job(s)", len(self._in_flight),
                     extra={"event": "drain_started", "queue": self.queue})
        while self._unfinished() and time.monotonic() < deadline:
            self._flush_quietly()
            self._wake.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
        self._flush_quietly()
        self._release_unfinished()

    def _unfinished(self) -> list[InFlight]:
        return [f for f in self._in_flight.values() if not f.timed_out]

    def _flush_quietly(self) -> None:
        try:
            self._write_outcomes()
        except (OperationalError, DBAPIError, psycopg.Error) as exc:
            self._database_failed(exc)

    def _release_unfinished(self) -> None:
        left = self._unfinished()
        if not left:
            return
        results = [(f.lease, interrupted(f.lease, "drain timeout: worker shutting down"))
                   for f in left]
        for attempt in range(3):
            try:
                with self.pool.engine.begin() as conn:
                    record_many(conn, self.id, results)
                break
            except (OperationalError, DBAPIError, psycopg.Error) as exc:
                self._database_failed(exc)
                time.sleep(0.2 * (attempt + 1))
        self.counters.released += len(left)
        log.warning("released %d unfinished job(s) at the drain deadline", len(left),
                    extra={"event": "drain_released", "queue": self.queue, "count": len(left)})
        for flight in left:
            self._in_flight.pop(flight.lease.job_id, None)

    def _shutdown(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener.join(3)
        try:
            with self.pool.engine.begin() as conn:
                queries.unregister_worker(conn, self.id)
        except Exception:  # the database may be gone; the row is pruned later
            pass
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(5)
            if not self._loop.is_running():
                self._loop.close()
        log.info("worker stopped", extra={"event": "worker_stopped", "queue": self.queue,
                                          "worker": self.id})

    def _start_listener(self) -> None:
        if self.spec.notify and self.pool.notify:
            self._listener = Listener(self.pool, self.queue, self._wake)
            self._listener.start()


class Listener(threading.Thread):
    """A dedicated autocommit connection that LISTENs and wakes the claim loop.

    Notifications are hints: a lost one costs latency (the loop also polls), never a job.
    Reconnects with capped backoff and re-subscribes.
    """

    def __init__(self, pool: WorkerPool, queue: str, wake: threading.Event) -> None:
        super().__init__(name=f"listen-{queue}", daemon=True)
        self.url = pool.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.queue = queue
        self.wake = wake
        self._halt = threading.Event()
        self.connected = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        backoff = Backoff()
        while not self._halt.is_set():
            try:
                self._listen()
                backoff.succeeded()
            except psycopg.Error as exc:
                self.connected.clear()
                delay = backoff.failed()
                log.info("listener disconnected (%s); reconnecting in %.1fs",
                         type(exc).__name__, delay, extra={"event": "listener_reconnect"})
                self.wake.set()  # poll now: notifications may have been lost meanwhile
                self._halt.wait(delay)

    def _listen(self) -> None:
        from .db import CONNECT_ARGS

        args = {k: v for k, v in CONNECT_ARGS.items() if k != "tcp_user_timeout"}
        with psycopg.connect(self.url, autocommit=True, application_name="workerpool-listen",
                             **args) as conn:
            conn.execute(f"LISTEN {queries.NOTIFY_CHANNEL}")
            self.connected.set()
            self.wake.set()
            while not self._halt.is_set():
                for note in conn.notifies(timeout=1.0):
                    if self.queue in note.payload.split(","):
                        self.wake.set()
