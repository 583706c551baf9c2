"""The worker runtime: what one child process does between claim and outcome.

One ``Worker`` serves one queue. Its main loop (the thread that calls :meth:`Worker.run`) is the
only thread that claims, renews and records outcomes; handlers run on ``concurrency`` daemon
threads (``async def`` handlers on one event loop thread) and hand their outcomes back through a
queue. No transaction is ever open while a handler runs: every database call is its own short
transaction, bounded by ``statement_timeout``/``lock_timeout`` set locally.

Each pass of the main loop:
  1. registers the process and releases its dead predecessors' claims (once),
  2. renews the leases that are due (first thing after a database outage, before any claim),
  3. fails jobs that overran their ``timeout`` (and asks for a recycle if one will not stop),
  4. writes finished outcomes in one batch, fenced on each lease,
  5. claims into its free room (``concurrency`` handler slots plus ``prefetch`` buffered jobs)
     when a handler slot is idle or at least half the prefetch buffer has been used up;
     otherwise outcomes wait, at most OUTCOME_FLUSH seconds, to ride with the next claim,
  6. reports a tick (the heartbeat) if the pass reached the database,
then waits for a notification, a finished job that left the buffer low, a stop request or the
next deadline (poll interval, lease renewal, job timeout, outcome flush), whichever comes first.

Prefetch: claimed jobs beyond the free handler slots wait, leased (renewal covers them), in the
handler threads' FIFO queue in claim order (priority first); a handler thread that finishes
takes the next one at once, without a round trip through the main loop. A job's ``timeout``
starts when its handler starts. On drain, jobs no handler has started are given back at once
(``pending``, attempt refunded, ``run_at`` kept, no error entry: nothing ran); a crashed
process's buffered jobs are released with its other claims. While the database is unreachable
it retries with capped backoff, keeps handlers running, keeps their outcomes, and sends no tick.

Built before a fork, started after it: ``__init__`` opens nothing; ``run()`` creates the engine,
the threads and the listener in the process that runs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import queue as queue_module
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from . import db, queries
from .errors import LeaseLost, Permanent, first_line
from .jobs import Job, new_worker_id
from .orphans import release_orphans
from .outcome import (
    FAIL,
    PERMANENT,
    UNSTARTED,
    Outcome,
    classify,
    error_entry,
    interrupted,
    record_many,
    timed_out,
    upcast,
)
from .payload import dumps
from .pool import QueueSpec, TaskSpec, WorkerPool

log = logging.getLogger("workerpool.worker")

#: Exit codes: the contract between a child and the supervisor.
EXIT_OK = 0
EXIT_RECYCLE = 75  # a handler ignored its timeout: restart me
EXIT_UNRELEASED = 69  # jobs still claimed at exit (the database refused the release)

FAULT_ENV = "WORKERPOOL_FAULT"  # test builds: "no_lease_renewal"
RECYCLE_GRACE = 5.0  # seconds a timed-out handler gets before the child is recycled
RECONNECT_MAX = 5.0  # cap of the backoff between attempts to reach the database
REGISTRY_BEAT = 10.0  # seconds between beats at most (status: live if seen within 60 s)
RELEASE_TRIES = 3  # attempts to release unfinished jobs at the drain deadline
LISTEN_SLICE = 0.25  # seconds the listener waits for notifications before checking for a stop
OUTCOME_FLUSH = 0.1  # seconds a finished job's outcome may wait to ride with the next claim

#: Limits on every transaction the worker runs (seconds; set locally, PgBouncer-safe).
STATEMENT_TIMEOUT = 15.0
LOCK_TIMEOUT = 3.0
IDLE_IN_TRANSACTION_TIMEOUT = 15.0

#: What "the database is in trouble" looks like: retried with backoff, never a crash.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, psycopg.Error, OSError)


@dataclass(eq=False)
class InFlight:
    """A claimed job this process is running.

    Written by the main loop, except ``thread``, ``future`` and ``returned`` which the handler
    thread sets (the last two under ``Worker._settle``, the lock that decides whether the
    handler's own result or the timeout is the attempt's outcome).
    """

    lease: queries.Lease
    spec: TaskSpec
    started: float  # monotonic: when claimed, then when its handler started
    deadline: float | None  # monotonic; None when the task has no timeout or has not started
    thread: int | None = None  # ident of the handler thread
    future: concurrent.futures.Future | None = None  # set for async handlers
    returned: bool = False  # the handler is no longer running
    timed_out: bool = False  # the timeout, not the handler, decided the outcome
    recorded: bool = False  # the outcome is written (or was fenced out)
    lost: bool = False  # another process owns the row now
    begun: bool = False  # a handler thread took it from the buffer (under ``_settle``)
    withdrawn: bool = False  # taken back from the buffer before any handler started it

    @property
    def holds_lease(self) -> bool:
        return not (self.timed_out or self.recorded or self.lost)

    @property
    def running(self) -> bool:
        """Still running and still ours to finish (a timed-out handler is already failed)."""
        return not (self.returned or self.timed_out)


class DeadJob(NamedTuple):
    """A job this worker moved to ``dead``: a row as ``workerpool.dead.report_dead`` takes it."""

    id: int
    queue: str
    task: str
    state: str
    attempts: int
    dead_reason: str
    last_error: dict[str, Any] | None = None


@dataclass
class Reconnect:
    """Capped exponential delay between attempts to reach the database (a loop, not a crash)."""

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
    unstarted: int = 0  # prefetched jobs given back without running
    timeouts: int = 0
    db_errors: int = 0
    states: dict[str, int] = field(default_factory=dict)


class HandlerThreads:
    """``size`` daemon threads running submitted calls.

    Daemon threads, not a ThreadPoolExecutor: the interpreter joins executor threads at exit, so
    one handler that never returns would keep a recycled process alive forever.
    """

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self._calls: queue_module.SimpleQueue[Callable[[], None] | None] = (
            queue_module.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for number in range(self.size):
            thread = threading.Thread(target=self._serve, name=f"{self.name}-{number}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, call: Callable[[], None]) -> None:
        self._calls.put(call)

    def waiting(self) -> int:
        """Calls submitted that no thread has taken yet (the prefetch buffer)."""
        return self._calls.qsize()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones finish their call first (nobody waits for them)."""
        for _ in self._threads:
            self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            call()


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
        self.tasks: dict[str, TaskSpec] = {name: pool.task_spec(name)
                                           for name in self.task_versions}
        self.stale_after = pool.stale_after(queue)
        # also the beat of the workers registry: `workerpool status` needs one every few seconds
        self.renew_every = min(self.stale_after / 3, REGISTRY_BEAT)
        self.renew_leases = os.environ.get(FAULT_ENV, "") != "no_lease_renewal"
        self.capacity = self.spec.concurrency + self.spec.prefetch  # jobs held at most
        self._refill = max(1, self.spec.prefetch // 2)  # claim no fewer while slots are busy
        self._next_wake = 0.0  # monotonic: when the main loop wakes at the latest
        self._last_write = 0.0  # monotonic: the last outcomes write
        self.counters = Counters()
        self.engine: Engine | None = None
        self._in_flight: dict[int, InFlight] = {}
        self._results: queue_module.SimpleQueue[tuple[InFlight, Outcome | None]] = (
            queue_module.SimpleQueue()
        )
        self._unwritten: list[tuple[InFlight, Outcome]] = []
        self._settle = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stop_requested_at: float | None = None
        self._stop_now = threading.Event()
        self._recycle = False
        self._unreleased = False  # the drain could not give its jobs back
        self._db = Reconnect()
        self._last_renew = time.monotonic()
        self._renew_now = False  # after an outage: renew before anything is claimed
        self._last_contact = 0.0  # monotonic time of the last successful database round trip
        self._reached_db = False  # this pass made a successful round trip
        self._registered = False
        self._threads = HandlerThreads(self.spec.concurrency, f"wp-{queue}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._loop_thread: threading.Thread | None = None
        self._listener: Listener | None = None
        self._main_conn: Connection | None = None  # the main loop's, kept across passes
        self._pooled = False  # behind PgBouncer: no session state (decided once, in _open)

    # -- control (thread- and signal-safe) -----------------------------------------------------

    def stop(self) -> None:
        """Stop claiming and drain (idempotent: a second call changes nothing).

        The drain's deadline counts from the first call, not from when the main loop notices.
        """
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stopping.set()
        self._wake.set()

    def stop_now(self) -> None:
        """Stop without waiting for in-flight jobs; they are released."""
        self._stop_now.set()
        self.stop()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def listener(self) -> Listener | None:
        return self._listener

    # -- the main loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; drain; return the exit code for the supervisor."""
        log.info("worker %s started on queue %s", self.id, self.queue,
                 extra={"event": "worker_started", "queue": self.queue, "worker": self.id})
        self._open()
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
            self._close()
        if self._unreleased:  # non-zero: the supervisor releases this worker's claims
            return EXIT_UNRELEASED
        return EXIT_RECYCLE if self._recycle else EXIT_OK

    def _pass(self, *, claiming: bool = True) -> None:
        self._reached_db = False
        try:
            self._register_once()
            self._renew_if_due()
            self._collect_results()
            self._enforce_timeouts()
            if claiming and self._should_claim():
                self._write_outcomes_and_claim()
            elif not claiming or self._outcomes_due():
                self._write_outcomes()
            self._beat_if_quiet()
        except DATABASE_ERRORS as exc:
            self._database_failed(exc)
            return
        if self._db.failures:
            log.info("database reachable again", extra={"event": "database_back",
                                                        "queue": self.queue})
        self._db.succeeded()
        if self._reached_db:
            self.on_tick()

    def _wait(self, until: float | None = None) -> None:
        """Sleep until woken or the next thing is due; during an outage, the backoff delay."""
        now = time.monotonic()
        if self._db.failures:
            # Finished handlers must not turn the backoff into a tight reconnect loop.
            if until is None:
                self._stopping.wait(self._db.delay)
            else:
                self._stop_now.wait(min(self._db.delay, max(0.0, until - now)))
            return
        due = [self.spec.poll_interval, self.spec.hang_timeout / 4,
               self._last_renew + self.renew_every - now]
        due += [deadline - now for deadline in self._deadlines()]
        if until is not None:
            due.append(until - now)
        if self.spec.prefetch and (self._in_flight or self._unwritten):
            due.append(OUTCOME_FLUSH)  # handlers do not wake the loop while the buffer is deep
        timeout = max(0.0, min(due))
        self._next_wake = now + timeout
        self._wake.wait(timeout)
        self._wake.clear()

    def _deadlines(self) -> Iterator[float]:
        """When each in-flight job times out, or when a timed-out one warrants a recycle."""
        for flight in self._in_flight.values():
            if flight.deadline is None or flight.returned:
                continue
            yield flight.deadline + (RECYCLE_GRACE if flight.timed_out else 0.0)

    def _database_failed(self, exc: BaseException) -> None:
        self.counters.db_errors += 1
        delay = self._db.failed()
        self._renew_now = True  # leases may have gone stale meanwhile: renew before claiming
        log.warning("database call failed (%s: %s); retrying in %.1fs", type(exc).__name__,
                    first_line(exc), delay,
                    extra={"event": "database_error", "queue": self.queue})

    @contextmanager
    def _transaction(self, *, main_loop: bool = True) -> Iterator[Connection]:
        """One short, time-bounded transaction on the worker's engine.

        The main loop keeps one connection across passes: no pool checkout and pre-ping round
        trip per transaction. After any error it is invalidated, so the next pass checks out a
        fresh one (pinged by the pool). Handler threads (checkpoints) use pooled connections.
        """
        assert self.engine is not None, "Worker.run() opens the engine"
        if not main_loop:
            with self.engine.begin() as conn:
                self._bound(conn)
                yield conn
            return
        conn = self._main_connection()
        try:
            with conn.begin():
                self._bound(conn)
                yield conn
        except BaseException:
            self._drop_main_connection()
            raise
        self._contacted()

    @contextmanager
    def _single_statement(self) -> Iterator[Connection]:
        """The main connection in autocommit for one statement that is its own transaction.

        One round trip instead of four (BEGIN, limits, statement, COMMIT): the limits are the
        connection's own (:func:`session_limits`). Only where sessions are ours: behind
        PgBouncer, :meth:`_transaction` instead.
        """
        conn = self._main_connection()
        try:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn
            conn.commit()  # ends SQLAlchemy's autobegun block; nothing is sent
            conn.execution_options(isolation_level=conn.default_isolation_level)
        except BaseException:
            self._drop_main_connection()
            raise
        self._contacted()

    def _contacted(self) -> None:
        self._reached_db = True
        self._last_contact = time.monotonic()

    @staticmethod
    def _bound(conn: Connection) -> None:
        queries.bound_transaction(conn, statement_timeout=STATEMENT_TIMEOUT,
                                  lock_timeout=LOCK_TIMEOUT,
                                  idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT)

    def _main_connection(self) -> Connection:
        if self._main_conn is None:
            assert self.engine is not None
            self._main_conn = self.engine.connect()
        return self._main_conn

    def _drop_main_connection(self, *, broken: bool = True) -> None:
        conn, self._main_conn = self._main_conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if broken:
                conn.invalidate()  # its state is unknown after an error: never reuse it
            conn.close()
            self._last_contact = time.monotonic()

    # -- steps ------------------------------------------------------------------------------------

    def _register_once(self) -> None:
        """Register this process and release the claims of the predecessors it replaces."""
        if self._registered:
            return
        with self._transaction() as conn:
            queries.register_worker(conn, self.id, host=socket.gethostname(), pid=os.getpid(),
                                    queue=self.queue, tasks=self.task_versions)
            dead = release_orphans(conn, self.orphans).dead
        self.orphans.clear()
        self._registered = True
        self._report_dead(dead)

    def _renew_if_due(self) -> None:
        """Extend the leases of running jobs every stale_after/3; beat the worker registry."""
        now = time.monotonic()
        if not self._renew_now and now - self._last_renew < self.renew_every:
            return
        held = [f for f in self._in_flight.values() if f.holds_lease]
        renewing = self.renew_leases and bool(held)
        with self._transaction() as conn:
            if renewing:
                renewed = queries.renew(conn, self.id,
                                        [(f.lease.job_id, f.lease.attempt) for f in held])
            registered = queries.beat_worker(conn, self.id)
        if renewing:
            self._mark_lost([f for f in held if f.lease.job_id not in renewed])
        if not registered:
            self._registered = False  # pruned while we were away: register again
        self._last_renew, self._renew_now = now, False

    def _mark_lost(self, flights: Iterable[InFlight]) -> None:
        for flight in flights:
            if not flight.lost:
                flight.lost = True
                self.counters.lost += 1
                log.warning("lease lost on job %s: another process may run it",
                            flight.lease.job_id,
                            extra={"event": "lease_lost", "job_id": flight.lease.job_id})
                if self._withdraw(flight):  # still buffered: never start it
                    flight.recorded = True  # nothing to write: the row is not ours
                    self._retire(flight)

    def _withdraw(self, flight: InFlight) -> bool:
        """Take a buffered job back before a handler starts it; False if one already has."""
        with self._settle:
            if flight.begun or flight.withdrawn or flight.returned:
                return False
            flight.withdrawn = flight.returned = True
            return True

    def _withdraw_unstarted(self) -> None:
        """Drain: give back at once every buffered job no handler has started."""
        taken = [f for f in list(self._in_flight.values()) if self._withdraw(f)]
        if not taken:
            return
        self._unwritten += [(flight, Outcome(UNSTARTED)) for flight in taken]
        log.info("giving back %d prefetched job(s) no handler started", len(taken),
                 extra={"event": "prefetch_returned", "queue": self.queue, "count": len(taken)})

    def _collect_results(self) -> None:
        while True:
            try:
                flight, outcome = self._results.get_nowait()
            except queue_module.Empty:
                return
            if outcome is None:  # it had timed out: the timeout is its outcome
                self._retire(flight)
            else:
                self._unwritten.append((flight, outcome))

    def _write_outcomes(self) -> None:
        """Write every outcome waiting, in one transaction; kept for the next pass on failure."""
        if not self._unwritten:
            return
        batch = self._unwritten
        with self._transaction() as conn:
            states = record_many(conn, self.id, [(f.lease, outcome) for f, outcome in batch])
        self._last_write = time.monotonic()
        self._outcomes_written(batch, states)

    def _outcomes_written(self, batch: list[tuple[InFlight, Outcome]],
                          states: dict[int, str | None]) -> None:
        """After the commit: forget the written outcomes, retire their jobs, report the dead."""
        self._unwritten = self._unwritten[len(batch):]
        dead = [self._recorded(flight, outcome, states.get(flight.lease.job_id))
                for flight, outcome in batch]
        self._report_dead([d for d in dead if d is not None])

    def _recorded(self, flight: InFlight, outcome: Outcome, state: str | None) -> DeadJob | None:
        flight.recorded = True
        self._retire(flight)
        job_id = flight.lease.job_id
        if outcome.kind == UNSTARTED:
            self.counters.unstarted += state is not None
            return None
        self.counters.finished += 1
        if state is None:
            self.counters.lost += 1
            log.warning("outcome of job %s not written: lease lost (or written before a"
                        " connection drop)", job_id,
                        extra={"event": "outcome_fenced_out", "job_id": job_id})
            return None
        self.counters.states[state] = self.counters.states.get(state, 0) + 1
        if state != "dead":
            return None
        reason = "permanent" if outcome.kind == PERMANENT else "exhausted"
        return DeadJob(job_id, self.queue, flight.spec.name, state, flight.lease.attempt,
                       reason, outcome.error or None)

    def _retire(self, flight: InFlight) -> None:
        """Forget a job once its handler has returned and its outcome is written."""
        if flight.returned and flight.recorded:
            self._in_flight.pop(flight.lease.job_id, None)

    def _report_dead(self, rows: list[DeadJob]) -> None:
        """The one place this process reports jobs it moved to ``dead`` (log + on_dead hooks)."""
        if not rows:
            return
        from .dead import report_dead

        try:
            report_dead(self.pool, rows)
        except Exception:
            log.exception("reporting dead jobs failed", extra={"event": "report_dead_failed"})

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for flight in list(self._in_flight.values()):
            if flight.deadline is None or now < flight.deadline or flight.returned:
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
        """The timeout decides this attempt: record a TimeoutError; cancel an async handler."""
        with self._settle:
            if flight.returned:
                return
            flight.timed_out = True
            future = flight.future
        stack = self._stack_of(flight)
        if future is not None:
            future.cancel()
        self.counters.timeouts += 1
        self._unwritten.append((flight, timed_out(flight.spec, flight.lease, stack)))
        log.warning("job %s exceeded its timeout of %gs", flight.lease.job_id,
                    flight.spec.timeout,
                    extra={"event": "job_timeout", "job_id": flight.lease.job_id})

    @staticmethod
    def _stack_of(flight: InFlight) -> str:
        """Where a sync handler is right now (what its timeout entry shows as traceback)."""
        frame = sys._current_frames().get(flight.thread) if flight.thread else None
        if frame is None or flight.future is not None:
            return ""
        return ("Handler stack when its timeout expired (most recent call last):\n"
                + "".join(traceback.format_stack(frame)))

    def _busy(self) -> int:
        """Jobs held once the waiting outcomes are written: running (timed-out ones too),
        buffered, or finished with the outcome not collected yet (still ``processing``)."""
        freed = sum(1 for flight, _ in self._unwritten if flight.returned)
        return len(self._in_flight) - freed

    def _free_slots(self) -> int:
        """Jobs this worker may still claim: its free slots plus free buffer places."""
        if self._stopping.is_set() or self._recycle:
            return 0
        return self.capacity - self._busy()

    def _should_claim(self) -> bool:
        """Claim when a handler slot idles with nothing buffered, or the buffer ran half empty.

        Claiming a few rows each time one job finishes would cost a transaction per job; the
        refill threshold makes each claim fetch at least half the prefetch (prefetch 0: claim
        into any free slot, as without a buffer).
        """
        room = self._free_slots()
        return room > 0 and (room >= self._refill or self.capacity - room < self.spec.concurrency)

    def _outcomes_due(self) -> bool:
        """Outcomes not riding with a claim are written within OUTCOME_FLUSH seconds."""
        if not self._unwritten:
            return False
        return (not self.spec.prefetch
                or time.monotonic() - self._last_write >= OUTCOME_FLUSH)

    def _write_outcomes_and_claim(self) -> None:
        """Write the waiting outcomes and claim into the free slots, in one transaction.

        One BEGIN/limits/COMMIT per pass instead of two; with no outcome waiting, the claim alone
        is one autocommit statement (one round trip). Nothing changes in memory before the
        commit: if the transaction fails, the outcomes stay waiting and nothing was claimed.
        """
        batch = list(self._unwritten)
        if batch or self._pooled:
            with self._transaction() as conn:
                states = (record_many(conn, self.id, [(f.lease, outcome) for f, outcome in batch])
                          if batch else {})
                rows = self._claim(conn)
        else:  # the claim alone, as after a wake-up: pickup latency is this round trip
            with self._single_statement() as conn:
                states, rows = {}, self._claim(conn)
        self._last_write = time.monotonic()
        if batch:
            self._outcomes_written(batch, states)
        if len(rows) > 1:  # the buffer is FIFO: hand jobs out in the claim's order
            rows.sort(key=_claim_order)
        for row in rows:
            self._start(row)
        self.counters.claimed += len(rows)

    def _claim(self, conn: Connection) -> list[Any]:
        return queries.claim(conn, queue=self.queue, worker=self.id, limit=self._free_slots(),
                             task_versions=self.task_versions, stale_after=self.stale_after)

    def _beat_if_quiet(self) -> None:
        """A pass with nothing to do still proves, once per poll interval, that the DB answers."""
        if self._reached_db or time.monotonic() - self._last_contact < self.spec.poll_interval:
            return
        with self._transaction() as conn:
            if not queries.beat_worker(conn, self.id):
                self._registered = False

    def _start(self, row: Any) -> None:
        """Hand a claimed job to the handler threads (it may wait in their queue: prefetch)."""
        lease = queries.Lease(row.id, row.attempts, self.id)
        spec = self.tasks.get(row.task)
        if spec is None:  # the claim filters on known tasks; never run what we cannot
            self._refuse(row, lease)
            return
        flight = InFlight(lease, spec, time.monotonic(), None)
        self._in_flight[row.id] = flight
        self._threads.submit(lambda: self._execute(flight, row))

    def _refuse(self, row: Any, lease: queries.Lease) -> None:
        spec = TaskSpec(name=row.task, queue=self.queue, fn=lambda job: None)
        flight = InFlight(lease, spec, time.monotonic(), None, returned=True)
        self._in_flight[row.id] = flight
        error = Permanent(f"no handler for task {row.task!r} in this worker")
        self._unwritten.append((flight, classify(error, spec, lease.attempt, self.id)))

    # -- handler threads --------------------------------------------------------------------------

    def _begin(self, flight: InFlight) -> bool:
        """A handler thread takes the job: its timeout starts now. False if it was withdrawn."""
        with self._settle:
            if flight.withdrawn:
                return False
            flight.begun = True
        flight.thread = threading.get_ident()
        flight.started = now = time.monotonic()
        if flight.spec.timeout:
            flight.deadline = now + flight.spec.timeout
            if flight.deadline < self._next_wake:
                self._wake.set()  # the main loop must enforce it before it planned to wake
        return True

    def _execute(self, flight: InFlight, row: Any) -> None:
        if not self._begin(flight):
            return
        try:
            exc = self._call(flight, self._job(flight, row))
        except BaseException as setup_error:  # e.g. an upcaster that raised
            exc = setup_error
        try:
            outcome = classify(exc, flight.spec, flight.lease.attempt, self.id)
        except BaseException as classify_error:  # never lose a result, whatever was raised
            outcome = Outcome(FAIL, error_entry(classify_error, attempt=flight.lease.attempt,
                                                worker=self.id), delay=60.0)
        with self._settle:
            flight.returned = True
            late = flight.timed_out
        self._results.put((flight, None if late else outcome))
        if not self.spec.prefetch or late or self._threads.waiting() < self._refill:
            self._wake.set()  # the buffer runs low (or no buffer): time to claim

    def _job(self, flight: InFlight, row: Any) -> Job:
        payload = row.payload
        if row.payload_version < flight.spec.version:
            payload = upcast(flight.spec, payload, row.payload_version)
        return Job.from_row(row, worker=self.id, saver=self._save_checkpoint, payload=payload)

    def _call(self, flight: InFlight, job: Job) -> BaseException | None:
        try:
            result = flight.spec.fn(job)
            if inspect.isawaitable(result):
                self._await(flight, result)
        except BaseException as exc:
            return exc
        return None

    def _await(self, flight: InFlight, awaitable: Any) -> None:
        """Run an ``async def`` handler on the worker's event loop; many overlap there."""
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._event_loop())
        with self._settle:
            flight.future = future
            cancel = flight.timed_out
        if cancel:
            future.cancel()
        future.result()

    def _save_checkpoint(self, job: Job, data: Any) -> None:
        text = dumps(data, limit=self.pool.payload_limit, what="checkpoint", object_only=False)
        lease = queries.Lease(job.id, job.attempt, self.id)
        with self._transaction(main_loop=False) as conn:
            saved = queries.save_checkpoint(conn, lease, text)
        if not saved:
            raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """One event loop thread per worker for ``async def`` handlers (started on first use)."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(target=loop.run_forever, daemon=True,
                                                     name=f"wp-{self.queue}-asyncio")
                self._loop_thread.start()
                self._loop = loop
            return self._loop

    # -- start and shutdown -----------------------------------------------------------------------

    def _open(self) -> None:
        name = f"workerpool:{self.queue}"[:63]
        size = min(self.spec.concurrency, 16) + 2  # handler checkpoints + the main loop
        # One decision for the engine's session limits and the claim path that relies on them.
        self._pooled = db.transaction_pooling()
        self.engine = db.create(self.pool.url, application_name=name, pool_size=size,
                                session_settings=session_limits())
        self._threads.start()
        if self.spec.notify and self.pool.notify and not self._pooled:
            self._listener = Listener(self.pool, self.queue, self._wake)
            self._listener.start()

    def _drain(self) -> None:
        """Give back buffered jobs; let running ones finish within drain_timeout; release the
        rest."""
        self._withdraw_unstarted()
        deadline = (self._stop_requested_at or time.monotonic()) + self.spec.drain_timeout
        if self._running():
            log.info("draining %d job(s)", len(self._running()),
                     extra={"event": "drain_started", "queue": self.queue})
        while self._running() and not self._stop_now.is_set() and time.monotonic() < deadline:
            self._pass(claiming=False)
            self._wait(until=deadline)
        if self._in_flight or self._unwritten:
            self._pass(claiming=False)  # write what finished meanwhile
        self._release_unfinished()

    def _running(self) -> list[InFlight]:
        return [flight for flight in self._in_flight.values() if flight.running]

    def _release_unfinished(self) -> None:
        """Give back what is still running: pending now, attempt refunded, checkpoint kept."""
        left = self._running()
        if not left and not self._unwritten:
            return
        reason = "worker stopped now" if self._stop_now.is_set() else "drain timeout"
        self._unwritten += [(f, interrupted(f.lease, f"{reason}: worker shutting down"))
                            for f in left]
        for attempt in range(RELEASE_TRIES):
            try:
                self._write_outcomes()
                break
            except DATABASE_ERRORS as exc:
                self._database_failed(exc)
                time.sleep(0.2 * (attempt + 1))
        else:
            self._unreleased = True
            log.error("could not release %d job(s); exiting %d so the supervisor releases them",
                      len(left), EXIT_UNRELEASED,
                      extra={"event": "release_failed", "queue": self.queue})
        if left:
            self.counters.released += len(left)
            log.warning("released %d unfinished job(s) at the drain deadline", len(left),
                        extra={"event": "drain_released", "queue": self.queue,
                               "count": len(left)})
        for flight in left:
            self._in_flight.pop(flight.lease.job_id, None)

    def _close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener.join(3)
        try:
            if self.engine is not None and self._registered:
                with self._transaction(main_loop=False) as conn:
                    queries.unregister_worker(conn, self.id)
        except DATABASE_ERRORS:  # the database may be gone; the row is pruned later
            pass
        self._threads.shutdown()
        if self._loop is not None:
            self._close_event_loop(self._loop)
        self._drop_main_connection(broken=False)
        if self.engine is not None:
            self.engine.dispose()
        log.info("worker %s stopped", self.id, extra={"event": "worker_stopped",
                                                      "queue": self.queue, "worker": self.id})


    def _close_event_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop the loop; close it unless a handler blocks it (a daemon thread: exit anyway)."""
        loop.call_soon_threadsafe(loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(2)
        if not loop.is_running():
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.close()


def session_limits() -> dict[str, str]:
    """The transaction limits as settings the worker's connections start with, for statements
    that run outside a transaction of ours (the one-statement claim; not behind PgBouncer)."""
    return queries.time_limits(statement_timeout=STATEMENT_TIMEOUT, lock_timeout=LOCK_TIMEOUT,
                               idle_timeout=IDLE_IN_TRANSACTION_TIMEOUT)


def _claim_order(row: Any) -> tuple:
    """The due arm's order (priority, then run_at, then id): the claim returns rows unordered."""
    return (-row.priority, row.run_at, row.id)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable




class Listener(threading.Thread):
    """A dedicated autocommit connection that LISTENs and wakes the claim loop.

    Notifications are hints: a lost one costs latency (the loop also polls), never a job. It
    reconnects with capped backoff, subscribes again, and wakes the loop after every reconnect
    (notifications sent meanwhile are lost). Not used behind PgBouncer transaction pooling:
    ``WorkerPool(notify=False)`` or ``pool.queue(..., notify=False)`` turn it off.
    """

    def __init__(self, pool: WorkerPool, queue: str, wake: threading.Event) -> None:
        super().__init__(name=f"wp-{queue}-listen", daemon=True)
        self.url = pool.url.set(drivername="postgresql")
        self.queue = queue
        self.wake = wake
        self.connected = threading.Event()
        self.reconnects = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        retry = Reconnect()
        while not self._halt.is_set():
            try:
                self._listen(retry)
            except Exception as exc:  # any failure: reconnect, never die
                self.connected.clear()
                delay = retry.failed()
                log.info("listener disconnected (%s: %s); reconnecting in %.1fs",
                         type(exc).__name__, first_line(exc), delay,
                         extra={"event": "listener_reconnect", "queue": self.queue})
                self.wake.set()  # poll now: notifications may have been lost meanwhile
                self._halt.wait(delay)

    def _connect_args(self) -> dict[str, Any]:
        args = dict(db.CONNECT_ARGS)
        if str(self.url.query.get("host", "")).startswith("/"):
            args.pop("tcp_user_timeout")  # unix socket: no TCP
        return args

    def _listen(self, retry: Reconnect) -> None:
        # Keyword arguments, not a DSN string: the password never sits in text that an error
        # message could echo into the log.
        target = self.url.translate_connect_args(username="user", database="dbname")
        target.update({key: str(value) for key, value in self.url.query.items()})
        with psycopg.connect(autocommit=True, application_name=f"workerpool-listen:"
                             f"{self.queue}"[:63], **target, **self._connect_args()) as conn:
            conn.execute(queries.LISTEN)
            if retry.failures:
                self.reconnects += 1
            retry.succeeded()
            self.connected.set()
            self.wake.set()
            while not self._halt.is_set():
                for note in conn.notifies(timeout=LISTEN_SLICE):
                    if self.queue in note.payload.split(","):
                        self.wake.set()
