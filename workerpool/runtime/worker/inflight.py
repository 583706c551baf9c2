"""A claimed job this process holds, and the one state machine it goes through.

Two threads change a job's state: the main loop (withdraw, time out, lose, record) and the
handler thread that runs it (begin, return). Each change is a :class:`Step` applied by
:meth:`InFlight.transition` under the job's own lock, so the two never decide the same question
differently (for example whether the handler's own result or the timeout is the attempt's
outcome). A step that loses such a race to the other thread changes nothing and says so; a
step that no state allows raises :class:`IllegalTransition`: a bug, never a job's fault.

The main path: a claim makes a job BUFFERED; a handler thread's ``begin`` makes it RUNNING, its
``return`` FINISHED, and the write of its outcome (``record``) RETIRED, when the worker forgets
it. Off that path: the drain's ``withdraw`` takes a buffered job back (WITHDRAWN, given back
unstarted); the timeout makes a running job TIMED_OUT, and ABANDONED once its failure is
written while the handler still runs; renewal that finds the lease gone (``lose``) drops a
buffered job at once and leaves the others RUNNING_LOST or UNRENEWED, their outcome to be fenced
out. :data:`TRANSITIONS` is the whole table.
"""

from __future__ import annotations

import concurrent.futures
import enum
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ...model.job import CancelFlag, Lease
from ...model.specs import TaskSpec


class FlightState(enum.Enum):
    """Where a claimed job is between its claim and the moment this process forgets it."""

    #: Claimed, waiting in the handler threads' queue (prefetch); its lease is renewed.
    BUFFERED = "buffered"
    #: A handler runs it; its lease is renewed.
    RUNNING = "running"
    #: A handler runs it, but renewal found the lease gone: another process may run it, and
    #: whatever this one writes for it will be fenced out.
    RUNNING_LOST = "running_lost"
    #: Past its timeout with the handler still running: the TimeoutError failure, waiting to be
    #: written, is the attempt's outcome, and the handler's own result will be ignored.
    TIMED_OUT = "timed_out"
    #: Its handler returned (or there is none: an unknown task); the outcome waits to be
    #: written, and the lease is renewed meanwhile.
    FINISHED = "finished"
    #: Taken back from the buffer before any handler started it (drain): it is given back
    #: unstarted, and the lease is renewed until then.
    WITHDRAWN = "withdrawn"
    #: No handler runs it and its outcome waits to be written, but its lease is no longer
    #: renewed: lost to another process, or the timeout already decided the attempt.
    UNRENEWED = "unrenewed"
    #: Its outcome is written (the timeout's, or the drain's release) while its handler still
    #: runs: nothing is left to do but forget it once the handler returns.
    ABANDONED = "abandoned"
    #: Its outcome is written (or fenced out) and no handler runs it: forgotten.
    RETIRED = "retired"

    # Members are singletons compared by identity; Enum's own hash runs Python code, and each
    # step looks states up several times
    __hash__ = object.__hash__


class Step(enum.Enum):
    """What happens to a claimed job; :data:`TRANSITIONS` says where each step leads."""

    BEGIN = "begin"  # a handler thread takes it from the buffer
    WITHDRAW = "withdraw"  # the drain takes it back from the buffer
    RETURN = "return"  # its handler returned or raised
    TIME_OUT = "time_out"  # its timeout expired
    LOSE = "lose"  # renewal found its lease gone
    RECORD = "record"  # its outcome was written, or fenced out

    __hash__ = object.__hash__  # as FlightState's


_S = FlightState

#: For each step, the state each state moves to. A state mapped to itself is a race the other
#: thread won (the step changes nothing); a state missing from a step's map is an illegal
#: transition.
TRANSITIONS: dict[Step, dict[FlightState, FlightState]] = {
    Step.BEGIN: {
        _S.BUFFERED: _S.RUNNING,
        # taken back (and maybe lost, or written) before this thread got to it
        _S.WITHDRAWN: _S.WITHDRAWN,
        _S.UNRENEWED: _S.UNRENEWED,
        _S.RETIRED: _S.RETIRED,
    },
    Step.WITHDRAW: {
        _S.BUFFERED: _S.WITHDRAWN,
        # a handler started it already, or it is past running: nothing to take back
        **{state: state for state in FlightState if state not in (_S.BUFFERED, _S.RETIRED)},
    },
    Step.RETURN: {
        _S.RUNNING: _S.FINISHED,
        _S.RUNNING_LOST: _S.UNRENEWED,
        _S.TIMED_OUT: _S.UNRENEWED,
        _S.ABANDONED: _S.RETIRED,
    },
    Step.TIME_OUT: {
        _S.RUNNING: _S.TIMED_OUT,
        _S.RUNNING_LOST: _S.TIMED_OUT,
        # the handler returned just before: its own result stands
        _S.FINISHED: _S.FINISHED,
        _S.UNRENEWED: _S.UNRENEWED,
    },
    Step.LOSE: {
        _S.BUFFERED: _S.RETIRED,  # never started: nothing to write, the row is not ours
        _S.RUNNING: _S.RUNNING_LOST,
        _S.FINISHED: _S.UNRENEWED,
        _S.WITHDRAWN: _S.UNRENEWED,
    },
    Step.RECORD: {
        _S.FINISHED: _S.RETIRED,
        _S.WITHDRAWN: _S.RETIRED,
        _S.UNRENEWED: _S.RETIRED,
        _S.TIMED_OUT: _S.ABANDONED,
        # released at the drain deadline while the handler still runs
        _S.RUNNING: _S.ABANDONED,
        _S.RUNNING_LOST: _S.ABANDONED,
    },
}

#: States whose lease renewal extends.
LEASED_STATES = frozenset({_S.BUFFERED, _S.RUNNING, _S.FINISHED, _S.WITHDRAWN})
#: States still running and still this process's to finish (a drain waits for them).
RUNNING_STATES = frozenset({_S.BUFFERED, _S.RUNNING, _S.RUNNING_LOST})
#: States no handler runs now or will: the job no longer takes a handler slot.
RETURNED_STATES = frozenset({_S.FINISHED, _S.WITHDRAWN, _S.UNRENEWED, _S.RETIRED})
#: States whose outcome was decided without the handler, which still runs.
OVERDUE_STATES = frozenset({_S.TIMED_OUT, _S.ABANDONED})


class IllegalTransition(RuntimeError):
    """A step that the job's state does not allow: a bug in the worker."""


@dataclass(eq=False)
class InFlight:
    """A claimed job this process holds.

    ``state`` changes only through :meth:`transition`. ``started``, ``deadline`` and ``thread``
    are written by the handler thread when it begins the job, before the main loop reads them;
    ``future`` is set under the job's lock (see :meth:`hold_future`).
    """

    lease: Lease
    spec: TaskSpec
    started: float  # monotonic: when claimed, then when its handler started
    deadline: float | None  # monotonic; None when the task has no timeout or has not started
    state: FlightState = FlightState.BUFFERED
    thread: int | None = None  # ident of the handler thread
    future: concurrent.futures.Future | None = None  # set for async handlers
    suspect: bool = False  # held by a process that died: it runs alone (nothing else claimed)
    ran: float | None = None  # seconds its handler ran, once it returned (for the metrics)
    cancel_deadline: float | None = None  # monotonic: past it, cancelled without the handler
    logs: Any = None  # its captured log records (joblogs.AttemptLog) if its queue keeps them
    progress: Any = None  # the job's progress throttle (model.progress.Throttle), once it reports
    completed_in: bool = False  # its handler's complete_in wrote done (its transaction may commit)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cancel: CancelFlag | None = field(default=None, repr=False)  # see cancel_flag

    def transition(self, step: Step) -> FlightState:
        """Apply ``step``; returns the state it was applied to (the caller's race verdict)."""
        with self._lock:
            before = self.state
            after = TRANSITIONS[step].get(before)
            if after is None:
                raise IllegalTransition(
                    f"job {self.lease.job_id}: cannot {step.value} when {before.value}"
                )
            self.state = after
            return before

    def cancel_flag(self) -> CancelFlag:
        """Set when an operator asks the job to stop. Made on first use, under the lock (the
        main loop and the handler may both ask first): few jobs are ever cancelled, and an
        Event per claimed job costs a drain more than the rest of its handoff to a thread."""
        flag = self._cancel
        if flag is None:
            with self._lock:
                if self._cancel is None:
                    self._cancel = CancelFlag()
                flag = self._cancel
        return flag

    @property
    def cancel_requested(self) -> bool:
        flag = self._cancel
        return flag is not None and flag.is_set()

    def hold_future(self, future: concurrent.futures.Future) -> bool:
        """Keep an async handler's future; True if its timeout already expired (cancel it).

        Under the same lock as :meth:`transition`: the main loop times the job out and then
        cancels the future it finds, so one of the two always cancels it.
        """
        with self._lock:
            self.future = future
            return self.state in OVERDUE_STATES

    @property
    def holds_lease(self) -> bool:
        return self.state in LEASED_STATES

    @property
    def running(self) -> bool:
        """Still running and still ours to finish (a timed-out handler is already failed)."""
        return self.state in RUNNING_STATES

    @property
    def returned(self) -> bool:
        """No handler runs it now or will."""
        return self.state in RETURNED_STATES

    @property
    def overdue(self) -> bool:
        """Its outcome was decided (by the timeout, or the drain) while its handler still runs."""
        return self.state in OVERDUE_STATES


class Flights:
    """The claimed jobs this process holds, by job id (the main loop's)."""

    def __init__(self) -> None:
        self._by_id: dict[int, InFlight] = {}

    def add(self, flight: InFlight) -> None:
        self._by_id[flight.lease.job_id] = flight

    def retire(self, flight: InFlight) -> None:
        """Forget a job once its handler has returned and its outcome is written."""
        if flight.state is FlightState.RETIRED:
            self.forget(flight)

    def get(self, job_id: int) -> InFlight | None:
        return self._by_id.get(job_id)

    def forget(self, flight: InFlight) -> None:
        self._by_id.pop(flight.lease.job_id, None)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[InFlight]:
        """A snapshot: the caller may retire jobs while it iterates."""
        return iter(list(self._by_id.values()))

    def held(self) -> list[InFlight]:
        return [flight for flight in self if flight.holds_lease]

    def running(self) -> list[InFlight]:
        return [flight for flight in self if flight.running]
