"""Where handlers run: ``concurrency`` daemon threads, and one event loop for ``async def`` ones.

Claimed jobs beyond the free handler slots wait, leased, in the threads' FIFO queue in claim
order (the prefetch buffer); a thread that finishes takes the next one at once, without a round
trip through the main loop. A job's ``timeout`` starts when its handler starts.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from typing import Any

from ... import sql
from ...model import tracing
from ...model.attempt import CANCELLED, Outcome, classify, error_entry, upcast
from ...model.errors import LeaseLost
from ...model.job import Job, Lease
from ...model.payload import dumps
from ...model.progress import Throttle, progress_json
from ...model.states import OutcomeKind
from ...sql import dependencies
from ...sql.progress import save_progress
from ..once import settle_outcome
from ..steps import StepStore
from .inflight import OVERDUE_STATES, FlightState, InFlight, Step
from .joblogs import CURRENT, AttemptLog, install
from .session import Session

log = logging.getLogger("workerpool.worker")


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
            thread = threading.Thread(target=self._serve, name=f"{self.name}-{number}", daemon=True)
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


class EventLoopThread:
    """One event loop thread per worker for ``async def`` handlers (started on first use)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, daemon=True, name=self.name
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop the loop; close it unless a handler blocks it (a daemon thread: exit anyway)."""
        loop = self._loop
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(2)
        if not loop.is_running():
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.close()


class Executor:
    """Runs claimed jobs' handlers and hands each outcome back to the main loop.

    ``began(flight)`` is called on the handler thread once the job's timeout runs;
    ``returned(flight, outcome)`` once its handler is done, with ``None`` for the outcome when
    the timeout had already decided the attempt.
    """

    def __init__(
        self,
        queue: str,
        worker_id: str,
        concurrency: int,
        session: Session,
        *,
        payload_limit: int,
        began: Callable[[InFlight], None],
        returned: Callable[[InFlight, Outcome | None], None],
        capture_logs: bool = False,
    ) -> None:
        self.worker_id, self.session, self.queue = worker_id, session, queue
        self.capture_logs = capture_logs
        self.payload_limit = payload_limit  # a checkpoint's and a result's, as a payload's
        self._began, self._returned = began, returned
        self._threads = HandlerThreads(concurrency, f"wp-{queue}")
        self._async = EventLoopThread(f"wp-{queue}-asyncio")
        self._steps = StepStore(
            worker_id, payload_limit, lambda: session.transaction(main_loop=False)
        )

    def start(self) -> None:
        if self.capture_logs:
            install()
        self._threads.start()

    def submit(self, flight: InFlight, row: Any) -> None:
        """Queue a claimed job for the next free handler thread."""
        self._threads.submit(lambda: self._execute(flight, row))

    def waiting(self) -> int:
        """Jobs no handler thread has taken yet (the prefetch buffer)."""
        return self._threads.waiting()

    def shutdown(self) -> None:
        self._threads.shutdown()
        self._async.close()

    # -- on a handler thread -------------------------------------------------------------------

    def _begin(self, flight: InFlight) -> bool:
        """A handler thread takes the job: its timeout starts now. False if it was withdrawn."""
        if flight.transition(Step.BEGIN) is not FlightState.BUFFERED:
            return False
        flight.thread = threading.get_ident()
        flight.started = now = time.monotonic()
        if flight.spec.timeout:
            flight.deadline = now + flight.spec.timeout
        if log.isEnabledFor(logging.DEBUG):  # a per-job line: nothing built unless shown
            log.debug(
                "job %s started task=%s attempt=%s",
                flight.lease.job_id,
                flight.spec.name,
                flight.lease.attempt,
                extra={
                    "event": "job_started",
                    "job_id": flight.lease.job_id,
                    "task": flight.spec.name,
                    "attempt": flight.lease.attempt,
                },
            )
        self._began(flight)
        return True

    def _execute(self, flight: InFlight, row: Any) -> None:
        if not self._begin(flight):
            return
        span = tracing.run_span(row)  # None unless OpenTelemetry is installed
        result = None
        if self.capture_logs:
            flight.logs = AttemptLog()
        captured = CURRENT.set(flight.logs)
        job = None
        try:
            job = self._job(flight, row)
            exc, result = self._call(flight, job)
        except BaseException as setup_error:  # e.g. an upcaster that raised
            exc = setup_error
        finally:
            CURRENT.reset(captured)
        self._last_progress(flight)
        flight.ran = time.monotonic() - flight.started
        try:
            outcome = classify(
                exc,
                flight.spec,
                flight.lease.attempt,
                self.worker_id,
                result=result,
                limit=self.payload_limit,
            )
        except BaseException as classify_error:  # never lose a result, whatever was raised
            outcome = Outcome(
                OutcomeKind.FAIL,
                error_entry(classify_error, attempt=flight.lease.attempt, worker=self.worker_id),
                delay=60.0,
            )
        if flight.cancel_requested:  # asked to stop: whatever it returned or raised
            outcome = CANCELLED
        outcome = self._committed(flight, job, outcome)
        state = flight.transition(Step.RETURN)
        late = state in OVERDUE_STATES  # decided without it
        if span is not None:
            span.finish(state.value if late else outcome.kind.value, exc)
        self._returned(flight, None if late else outcome)

    def _job(self, flight: InFlight, row: Any) -> Job:
        payload = row.payload
        if row.payload_version < flight.spec.version:
            payload = upcast(flight.spec, payload, row.payload_version)
        return Job.from_row(
            row,
            worker=self.worker_id,
            saver=self._save_checkpoint,
            payload=payload,
            cancel=flight.cancel_flag,
            parents=self._parent_results,
            steps=self._steps,
            progress=lambda job, value: self._progress(flight, job, value),
            completion=lambda job, conn, text: self._complete_in(flight, job, conn, text),
        )

    def _complete_in(self, flight: InFlight, job: Job, conn: Any, text: str | None) -> Any:
        followed = self._steps.once(job, conn, text)
        # its lease will be found gone (done) if the caller's transaction commits: not a loss
        flight.completed_in = True
        return followed

    def _committed(self, flight: InFlight, job: Job | None, outcome: Outcome) -> Outcome:
        """``committed`` when the handler's own transaction ended the job (never lost: the
        database is asked again on failure, the answer decides whether the worker writes)."""
        try:
            return settle_outcome(outcome, job, self._steps.transaction, flight.lease)
        except Exception as exc:
            log.warning(
                "job %s: could not read whether complete_in committed: %s",
                flight.lease.job_id,
                exc,
                extra={"event": "complete_in_unknown", "job_id": flight.lease.job_id},
            )
            return outcome  # written fenced: a done that committed keeps the row as it is

    def _call(self, flight: InFlight, job: Job) -> tuple[BaseException | None, Any]:
        """``(None, what the handler returned)``, or ``(what it raised, None)``."""
        try:
            result = flight.spec.call(job)
            if result is not None and inspect.isawaitable(result):  # None: most sync handlers
                result = self._await(flight, result)
        except BaseException as exc:
            return exc, None
        return None, result

    def _await(self, flight: InFlight, awaitable: Any) -> Any:
        """Run an ``async def`` handler on the worker's event loop; many overlap there.

        Its task runs in a copy of this thread's context (``call_soon_threadsafe`` copies it),
        so the run span current here is current in the handler too."""
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._async.loop())
        if flight.hold_future(future) or flight.cancel_requested:
            future.cancel()
        return future.result()

    def _parent_results(self, job_id: int) -> dict[int, Any]:
        with self.session.transaction(main_loop=False) as conn:
            return dependencies.parent_results(conn, job_id)

    def _save_checkpoint(self, job: Job, data: Any) -> None:
        text = dumps(data, limit=self.payload_limit, what="checkpoint", object_only=False)
        lease = Lease(job.id, job.attempt, self.worker_id)
        with self.session.transaction(main_loop=False) as conn:
            saved = sql.save_checkpoint(conn, lease, text)
        if not saved:
            raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")

    def _progress(self, flight: InFlight, job: Job, value: Any) -> None:
        """``job.progress``: checked, then written now or held back by the job's throttle."""
        text = progress_json(value)
        if flight.progress is None:
            flight.progress = Throttle()
        if flight.progress.offer(text) and not self._write_progress(job.id, job.attempt, text):
            raise LeaseLost(f"job {job.id}: lease lost, progress not saved")

    def _last_progress(self, flight: InFlight) -> None:
        """The report the throttle held back, written as the handler returns (best effort: a
        lost lease or a failed write only loses the progress shown)."""
        text = flight.progress.last() if flight.progress is not None else None
        if text is None:
            return
        try:
            self._write_progress(flight.lease.job_id, flight.lease.attempt, text)
        except Exception as exc:  # the outcome still gets written
            log.warning(
                "job %s: last progress not written: %s",
                flight.lease.job_id,
                exc,
                extra={"event": "progress_not_written", "job_id": flight.lease.job_id},
            )

    def _write_progress(self, job_id: int, attempt: int, text: str) -> bool:
        with self.session.transaction(main_loop=False) as conn:
            return save_progress(conn, Lease(job_id, attempt, self.worker_id), text)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
