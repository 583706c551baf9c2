"""Durable steps as a handler sees them: ``job.step``, ``job.sleep`` and ``job.wait_for``.

A job's steps are one JSON object on its row (``steps``: name → entry), read by the claim. A run
of the handler starts from the top: a step that finished in an earlier run returns its stored
value without running again, and the first one that did not finish runs and is written, fenced
on the lease, before it returns. The runtime gives the :class:`StepStore` that writes a step and
reads a signal; nothing here touches the database.

A sleep, or a wait whose signal was not sent yet, leaves the handler by raising
:class:`Suspended`: a ``BaseException``, so that a handler's ``except Exception`` cannot swallow
it. The runner turns it into the outcome that puts the job back without spending its attempt
(snoozed until the sleep ends, or ``waiting`` for the signal); the step is written by that same
outcome write, so a crash in between loses both or neither.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import awaits
from .awaits import AWAIT, AwaitedRead
from .errors import (
    MAX_DELAY,
    CompletionRefused,
    InvalidStep,
    LeaseLost,
    StepNameReused,
    UnknownJob,
)
from .payload import DEFAULT_PAYLOAD_LIMIT, dumps

#: Step and signal names: at most this many characters (they are keys of a JSON object and
#: shown on the dashboard).
NAME_LIMIT = 200

STEP, SLEEP, WAIT = "step", "sleep", "wait"


def check_name(name: Any, what: str = "step", error: type[Exception] = InvalidStep) -> str:
    """A step or signal name: a non-empty string of at most NAME_LIMIT characters, no NUL and
    no lone surrogate (PostgreSQL stores neither)."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > NAME_LIMIT
        or "\x00" in name
        or not _utf8(name)
    ):
        raise error(
            f"{what} name must be a non-empty string of at most {NAME_LIMIT}"
            f" characters, got {name!r}"
        )
    return name


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_seconds(value: Any, what: str) -> float:
    """A sleep's seconds or a wait's timeout: a finite number within 0..MAX_DELAY."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 <= value <= MAX_DELAY)
    ):
        raise InvalidStep(
            f"{what} must be a number of seconds within 0..{MAX_DELAY:.0f}, got {value!r}"
        )
    return float(value)


def finished(entry: dict[str, Any] | None) -> bool:
    """Whether a stored step is over (a wait is stored unfinished while its job waits)."""
    return entry is not None and entry.get("finished_at") is not None


@dataclass(frozen=True)
class SignalRead:
    """What :meth:`StepStore.signal` found: whether the signal was sent, its payload, and
    whether the wait's deadline has passed (on the database clock)."""

    sent: bool
    payload: Any = None
    expired: bool = False


class StepStore(Protocol):
    """The runtime's side of steps (one per worker or inline runner)."""

    def record(
        self, job: Any, name: str, kind: str, value: str, elapsed: float, timed_out: bool = False
    ) -> dict[str, Any] | None:
        """Write step ``name`` with ``value`` (JSON text), fenced on the job's lease; the
        entry written, or None when the lease was lost (nothing written). ``elapsed``: how
        long it ran; a wait keeps the start its job began waiting at."""

    def signal(self, name: str, deadline: str | None) -> SignalRead:
        """Read signal ``name``, and whether ``deadline`` (a stored timestamp) has passed."""

    def awaited(self, job_id: int, deadline: str | None) -> AwaitedRead:
        """Read job ``job_id`` for ``job.wait_for_job``, and whether ``deadline`` has passed."""

    def limit(self) -> int:
        """The size limit of one step's value (the payload limit)."""

    def record_in(
        self, conn: Any, job: Any, name: str, kind: str, value: str, elapsed: float
    ) -> dict[str, Any] | None:
        """:meth:`record` in ``conn``'s open transaction (``step(conn=)``)."""


@dataclass(frozen=True)
class Suspension:
    """The job sleeps (``kind`` sleep, for ``seconds``), waits for signal ``name`` (``kind``
    wait, for at most ``seconds``; None: no limit) or awaits job ``job_id`` (``kind`` await,
    step ``name``)."""

    kind: str
    name: str
    seconds: float | None
    job_id: int | None = None


class Suspended(BaseException):
    """Leave the handler for a :class:`Suspension`. Raised by :meth:`Steps.sleep` and
    :meth:`Steps.wait_for`; the runner makes it the attempt's outcome."""

    def __init__(
        self, kind: str, name: str, seconds: float | None, job_id: int | None = None
    ) -> None:
        self.suspension = Suspension(kind, name, seconds, job_id)
        super().__init__(f"{kind} {name!r}")


class Steps:
    """One run's steps: what earlier runs stored, and the names this run has used."""

    def __init__(self, job: Any, stored: dict[str, Any] | None, store: StepStore | None) -> None:
        self.job, self.store = job, store
        self.stored: dict[str, Any] = dict(stored or {})
        self.used: set[str] = set()
        self._lock = threading.Lock()
        #: What ``complete_in``'s write returned (the transaction it ran in may yet roll back).
        self.completed: Any = None
        #: The handler returned: ``complete_in`` is refused from now on.
        self.ended = False

    def begin(self, name: str) -> dict[str, Any] | None:
        """Take ``name`` for this run; its stored entry, if an earlier run stored one."""
        check_name(name)
        with self._lock:
            if name in self.used:
                raise StepNameReused(
                    f"job {self.job.id}: step {name!r} was already used in"
                    " this run; give each step its own name"
                )
            self.used.add(name)
            return self.stored.get(name)

    def step(self, name: str, fn: Callable[[], Any], conn: Any = None) -> Any:
        entry = self.begin(name)
        if finished(entry):
            return entry["value"]  # type: ignore[index]
        self.job.checkpoint()  # a cancelled job starts no new step
        started = time.monotonic()
        value = fn()
        return self.record(name, STEP, value, time.monotonic() - started, conn=conn)

    def complete_in(self, conn: Any, result: Any) -> None:
        """``job.complete_in``: refused (nothing written) unless this is the first call of a
        running handler on a job not asked to stop."""
        completion = self.job._completion
        if completion is None or self.ended:
            raise CompletionRefused(
                f"job {self.job.id}: complete_in called outside a running handler"
            )
        with self._lock:
            if self.completed is not None:
                raise CompletionRefused(f"job {self.job.id}: complete_in was already called")
            if self.job.cancelled:
                raise CompletionRefused(f"job {self.job.id} was cancelled; not completed")
            limit = self.store.limit() if self.store is not None else DEFAULT_PAYLOAD_LIMIT
            text = (
                None
                if result is None
                else dumps(result, limit=limit, what="result", object_only=False)
            )
            self.completed = completion(self.job, conn, text)

    async def step_async(
        self, name: str, coro_fn: Callable[[], Awaitable[Any]], conn: Any = None
    ) -> Any:
        entry = self.begin(name)
        if finished(entry):
            return entry["value"]  # type: ignore[index]
        self.job.checkpoint()
        started = time.monotonic()
        value = await coro_fn()
        elapsed = time.monotonic() - started
        if conn is not None:  # an AsyncConnection: the record in its transaction
            return await conn.run_sync(
                lambda sync: self.record(name, STEP, value, elapsed, conn=sync)
            )
        # the fenced write is a blocking round trip: off the event loop other handlers share
        return await asyncio.get_running_loop().run_in_executor(
            None, self.record, name, STEP, value, elapsed
        )

    def record(
        self,
        name: str,
        kind: str,
        value: Any,
        elapsed: float,
        timed_out: bool = False,
        conn: Any = None,
    ) -> Any:
        """Write a finished step (in ``conn``'s transaction if given, else in one of its own);
        returns its value as a replay will return it (decoded JSON)."""
        store = self._store()
        text = dumps(value, limit=store.limit(), what=f"step {name!r}", object_only=False)
        if conn is None:
            entry = store.record(self.job, name, kind, text, elapsed, timed_out)
        else:
            entry = store.record_in(conn, self.job, name, kind, text, elapsed)
        if entry is None:
            raise LeaseLost(f"job {self.job.id}: lease lost, step {name!r} not recorded")
        with self._lock:
            self.stored[name] = entry
        return json.loads(text)

    def sleep(self, name: str, seconds: float) -> None:
        seconds = check_seconds(seconds, "sleep")
        if finished(self.begin(name)):
            return
        raise Suspended(SLEEP, name, seconds)

    def wait_for(self, name: str, timeout: float | None) -> Any:
        if timeout is not None:
            timeout = check_seconds(timeout, "wait_for timeout")
        entry = self.begin(name)
        if finished(entry):
            if entry.get("timed_out"):  # type: ignore[union-attr]
                raise TimeoutError(f"wait for signal {name!r} timed out")
            return entry["value"]  # type: ignore[index]
        read = self._store().signal(name, entry.get("deadline") if entry else None)
        if read.sent:
            return self.record(name, WAIT, read.payload, 0.0)
        if entry is not None and read.expired:
            # stored as timed out: every later run raises here too
            self.record(name, WAIT, None, 0.0, timed_out=True)
            raise TimeoutError(f"wait for signal {name!r} timed out")
        raise Suspended(WAIT, name, timeout)

    def wait_for_job(self, job_id: int, timeout: float | None) -> Any:
        job_id = awaits.check_awaited(job_id, self.job.id)
        if timeout is not None:
            timeout = check_seconds(timeout, "wait_for_job timeout")
        name = awaits.step_name(job_id)
        entry = self.begin(name)
        if finished(entry):
            if entry.get("timed_out"):  # type: ignore[union-attr]
                raise awaits.timed_out(job_id)
            return awaits.outcome(entry["value"])  # type: ignore[index]
        read = self._store().awaited(job_id, entry.get("deadline") if entry else None)
        if not read.found:
            raise UnknownJob(f"job {self.job.id} awaits job {job_id}, which does not exist")
        if read.outcome is not None:
            return awaits.outcome(self.record(name, AWAIT, read.outcome, 0.0))
        if entry is not None and read.expired:
            # stored as timed out: every later run raises here too
            self.record(name, AWAIT, None, 0.0, timed_out=True)
            raise awaits.timed_out(job_id)
        raise Suspended(AWAIT, name, timeout, job_id)

    def _store(self) -> StepStore:
        if self.store is None:
            raise RuntimeError("this Job is not attached to a worker; steps are unavailable")
        return self.store
