"""Reading a job and waiting for its result: ``pool.job``, ``pool.result``, ``pool.result_async``.

The client's calls, beside :mod:`.enqueue`: the statements are :mod:`workerpool.sql.results`',
the values (:class:`~workerpool.model.results.JobInfo`) the model's.

A handler's return value is the job's result (JSON, checked like a payload), written by the
completing UPDATE. ``pool.result`` waits for a job to end:

- it reads the job; a job that has ended answers at once (``done``: its result; ``dead``:
  :class:`JobFailed`; ``cancelled``: :class:`JobCancelled`);
- otherwise it lists itself in ``workerpool_waiters`` and waits for a notification on
  ``workerpool_results`` (sent once by the transaction that ends a listed job), reading the job
  again on each one, and polling meanwhile with a growing pause (up to :data:`POLL_CAP_LISTENING`)
  in case a notification was lost: a lost one costs latency, never a wrong answer;
- without LISTEN (``WorkerPool(notify=False)``, or ``$WORKERPOOL_PGBOUNCER`` for PgBouncer's
  transaction pooling: the caller says, ``listen=``) it polls alone, from :data:`POLL_FIRST` up
  to :data:`POLL_CAP`.

One listener thread per process serves every waiter of a pool (one connection, however many
callers wait); it starts with the first wait and closes after :data:`LISTENER_IDLE` seconds with
nobody waiting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from ..model.errors import ResultTimeout, UnknownJob, first_line
from ..model.results import JobInfo, check_id, check_timeout
from ..sql import db, results

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("workerpool.results")

#: Seconds between two reads of a waited-for job: the first pause, and the longest one while a
#: listener runs (notifications do the waking; the polls only cover a lost one) or without one.
POLL_FIRST = 0.01
POLL_CAP_LISTENING = 1.0
POLL_CAP = 0.25
#: Seconds the shared listener stays connected with nobody waiting.
LISTENER_IDLE = 10.0
_LISTEN_SLICE = 0.25


class Source(Protocol):
    """Where a waiter reads: a pool's engines (``WorkerPool``). One listener serves each."""

    @property
    def url(self) -> URL: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def async_engine(self) -> AsyncEngine: ...


# ---------------------------------------------------------------------------------------------
# reading


def read(pool: Source, job_id: int) -> JobInfo:
    """``pool.job``: the job now; UnknownJob when no job has this id (or it was pruned)."""
    check_id(job_id)
    with pool.engine.connect() as conn:
        row = results.read_job(conn, job_id)
    if row is None:
        raise UnknownJob(f"no job {job_id} (never enqueued, or pruned after the retention)")
    return JobInfo.of(row)


async def read_async(pool: Source, job_id: int) -> JobInfo:
    async with pool.async_engine.connect() as conn:
        row = await conn.run_sync(results.read_job, job_id)
    if row is None:
        raise UnknownJob(f"no job {job_id} (never enqueued, or pruned after the retention)")
    return JobInfo.of(row)


# ---------------------------------------------------------------------------------------------
# waiting


class _Pauses:
    """The pauses between reads: doubling from POLL_FIRST up to the cap, never past the
    deadline."""

    def __init__(self, timeout: float | None, cap: float) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.cap, self.pause = cap, POLL_FIRST

    def next(self) -> float | None:
        """Seconds to wait before the next read; None once the deadline has passed."""
        wait = self.pause
        self.pause = min(self.pause * 2, self.cap)
        if self.deadline is None:
            return wait
        left = self.deadline - time.monotonic()
        return None if left <= 0 else min(wait, left)


def wait(pool: Source, job_id: int, timeout: float | None, *, listen: bool) -> Any:
    """``pool.result``: see the module docstring. ``listen``: whether waiters of ``pool`` can
    LISTEN (``notify`` on, and not behind PgBouncer's transaction pooling)."""
    check_id(job_id)
    timeout = check_timeout(timeout)
    info = read(pool, job_id)
    if info.finished:
        return info.outcome()
    pauses = _Pauses(timeout, POLL_CAP_LISTENING if listen else POLL_CAP)
    with _Subscription(pool, job_id, listen) as subscription:
        while True:
            info = read(pool, job_id)
            if info.finished:
                return info.outcome()
            pause = pauses.next()
            if pause is None:
                raise _timed_out(job_id, timeout, info)
            subscription.wait(pause)


async def wait_async(pool: Source, job_id: int, timeout: float | None, *, listen: bool) -> Any:
    """``pool.result_async``: :func:`wait` on the pool's async engine; the event loop is never
    blocked (the shared listener thread wakes the waiting task through the loop)."""
    check_id(job_id)
    timeout = check_timeout(timeout)
    info = await read_async(pool, job_id)
    if info.finished:
        return info.outcome()
    pauses = _Pauses(timeout, POLL_CAP_LISTENING if listen else POLL_CAP)
    subscription = _AsyncSubscription(pool, job_id, listen)
    await subscription.start()
    try:
        while True:
            info = await read_async(pool, job_id)
            if info.finished:
                return info.outcome()
            pause = pauses.next()
            if pause is None:
                raise _timed_out(job_id, timeout, info)
            await subscription.wait(pause)
    finally:
        await subscription.stop()


def _timed_out(job_id: int, timeout: float | None, info: JobInfo) -> ResultTimeout:
    return ResultTimeout(
        f"job {job_id} did not finish within {timeout:g}s (it is {info.state};"
        " it may still finish: wait again, or read pool.job)"
    )


class _Subscription:
    """A sync waiter: a ticket with the shared listener and a row in the waiters table."""

    def __init__(self, pool: Source, job_id: int, listen: bool) -> None:
        self.pool, self.job_id, self.listen = pool, job_id, listen
        self.event = threading.Event()
        self.listener: ResultListener | None = None
        self.waiter_id: int | None = None

    def __enter__(self) -> _Subscription:
        if self.listen:
            self.listener = subscribe(self.pool, self.job_id, self.event.set)
            with self.pool.engine.begin() as conn:
                self.waiter_id = results.add_waiter(conn, self.job_id)
        return self

    def wait(self, seconds: float) -> None:
        if self.listener is None:
            time.sleep(seconds)
            return
        self.event.wait(seconds)
        self.event.clear()

    def __exit__(self, *exc_info: Any) -> None:  # also when the wait is interrupted
        if self.listener is None:
            return
        self.listener.remove(self.job_id, self.event.set)
        if self.waiter_id is not None:
            try:
                with self.pool.engine.begin() as conn:
                    results.remove_waiter(conn, self.waiter_id)
            except Exception as exc:  # the maintenance child prunes what is left
                log.debug("could not remove waiter row: %s", first_line(exc))


class _AsyncSubscription:
    """An async waiter: the listener thread wakes it through its event loop."""

    def __init__(self, pool: Source, job_id: int, listen: bool) -> None:
        self.pool, self.job_id, self.listen = pool, job_id, listen
        self.event = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.listener: ResultListener | None = None
        self.waiter_id: int | None = None

    def _wake(self) -> None:
        self.loop.call_soon_threadsafe(self.event.set)

    async def start(self) -> None:
        if not self.listen:
            return
        self.listener = subscribe(self.pool, self.job_id, self._wake)
        async with self.pool.async_engine.begin() as conn:
            self.waiter_id = await conn.run_sync(results.add_waiter, self.job_id)

    async def wait(self, seconds: float) -> None:
        if self.listener is None:
            await asyncio.sleep(seconds)
            return
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            pass
        self.event.clear()

    async def stop(self) -> None:
        if self.listener is None:
            return
        self.listener.remove(self.job_id, self._wake)
        if self.waiter_id is not None:
            try:
                async with self.pool.async_engine.begin() as conn:
                    await conn.run_sync(results.remove_waiter, self.waiter_id)
            except Exception as exc:
                log.debug("could not remove waiter row: %s", first_line(exc))


# ---------------------------------------------------------------------------------------------
# the shared listener


class ResultListener(threading.Thread):
    """One LISTEN connection on ``workerpool_results`` for every waiter of one pool in this
    process. Each notification names the jobs that ended (``*``: too many to list); their
    waiters are woken. After a reconnect every waiter is woken (notifications may have been
    lost meanwhile). With nobody waiting for :data:`LISTENER_IDLE` seconds it disconnects and
    ends; the next waiter starts a new one."""

    def __init__(self, pool: Source) -> None:
        super().__init__(name="workerpool-results", daemon=True)
        self.url = pool.url
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._wakers: dict[int, list[Callable[[], None]]] = {}
        self._idle_since = time.monotonic()
        self.done = False
        self.connected = threading.Event()

    def add(self, job_id: int, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.setdefault(job_id, []).append(wake)

    def remove(self, job_id: int, wake: Callable[[], None]) -> None:
        with self._lock:
            wakers = self._wakers.get(job_id, [])
            if wake in wakers:
                wakers.remove(wake)
            if not wakers:
                self._wakers.pop(job_id, None)
            if not self._wakers:
                self._idle_since = time.monotonic()

    def _wake(self, ids: list[int] | None) -> None:
        with self._lock:
            if ids is None:
                wakers = [w for ws in self._wakers.values() for w in ws]
            else:
                wakers = [w for job_id in ids for w in self._wakers.get(job_id, ())]
        for wake in wakers:
            wake()

    def _stopping(self) -> bool:
        """Idle long enough: done (decided under the lock new waiters subscribe under, so none
        joins a listener that is leaving)."""
        with _LISTENERS_LOCK, self._lock:
            if not self._wakers and time.monotonic() - self._idle_since > LISTENER_IDLE:
                self.done = True
            return self.done

    def run(self) -> None:
        delay = 0.1
        try:
            while not self._stopping():
                try:
                    self._listen()
                except Exception as exc:  # reconnect; the waiters poll meanwhile
                    self.connected.clear()
                    log.info(
                        "results listener disconnected (%s); reconnecting in %.1fs",
                        first_line(exc),
                        delay,
                        extra={"event": "results_listener_reconnect"},
                    )
                    self._wake(None)
                    time.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            with _LISTENERS_LOCK:
                self.done = True

    def _listen(self) -> None:
        args: dict[str, Any] = {**db.CONNECT_ARGS, **db.connect_kwargs(self.url)}
        if db.on_unix_socket(self.url):
            args.pop("tcp_user_timeout")
        with psycopg.connect(
            autocommit=True, application_name="workerpool-results", **args
        ) as conn:
            conn.execute(f"LISTEN {results.RESULTS_CHANNEL}")
            self.connected.set()
            self._wake(None)  # anything that ended before LISTEN took effect: read again
            while not self._stopping():
                for note in conn.notifies(timeout=_LISTEN_SLICE):
                    self._wake(_ids(note.payload))
        self.connected.clear()


def _ids(payload: str) -> list[int] | None:
    if payload == "*":
        return None
    return [int(part) for part in payload.split(",") if part.isdigit()]


_LISTENERS: weakref.WeakKeyDictionary[Any, ResultListener] = weakref.WeakKeyDictionary()
_LISTENERS_LOCK = threading.Lock()


def subscribe(pool: Source, job_id: int, wake: Callable[[], None]) -> ResultListener:
    """Call ``wake`` when ``job_id`` may have ended, from the pool's listener in this process
    (started if there is none, or it ended, or it was inherited over a fork)."""
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(pool)
        if listener is None or listener.done or listener.pid != os.getpid():
            listener = ResultListener(pool)
            _LISTENERS[pool] = listener
            listener.start()
        listener.add(job_id, wake)
        return listener


def stop_listener(pool: Source) -> None:
    """End the pool's listener in this process (``pool.dispose()``): it would otherwise keep
    its connection, or keep reconnecting to a database that is gone, until idle. A waiter that
    is still waiting polls on, and a later wait starts a new listener."""
    with _LISTENERS_LOCK:
        listener = _LISTENERS.pop(pool, None)
    if listener is not None:
        with listener._lock:
            listener.done = True


__all__ = [
    "ResultListener",
    "Source",
    "read",
    "read_async",
    "stop_listener",
    "subscribe",
    "wait",
    "wait_async",
]
