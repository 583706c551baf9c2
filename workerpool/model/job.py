"""A claimed job: the frozen view a handler receives (:class:`Job`) and the lease its worker
holds on the row (:class:`Lease`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .steps import Steps, StepStore


@dataclass(frozen=True)
class Job:
    """One claimed job, as the handler sees it.

    ``attempt`` counts from 1 and includes this run. ``checkpoint_data`` is what an earlier
    attempt saved with :meth:`checkpoint` (None if nothing was saved).
    """

    id: int
    queue: str
    task: str
    payload: dict[str, Any]
    payload_version: int
    attempt: int
    max_attempts: int
    key: str | None = None
    priority: int = 0
    run_at: datetime | None = None
    checkpoint_data: Any = None
    worker: str = ""
    #: The batch this job is a member of; in a batch's callback, the batch it reports on.
    batch_id: int | None = None
    _save_checkpoint: Callable[[Job, Any], None] | None = field(
        default=None, repr=False, compare=False
    )
    _cancel: Callable[[], CancelFlag] | None = field(default=None, repr=False, compare=False)
    #: Reads the parents' results (``after=``) when first asked for: a job without parents
    #: pays nothing for them.
    _parents: Callable[[int], dict[int, Any]] | None = field(
        default=None, repr=False, compare=False
    )
    #: The steps earlier runs finished (name → entry: value, kind, started_at, finished_at).
    steps_data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _step_store: StepStore | None = field(default=None, repr=False, compare=False)
    _steps: Steps | None = field(default=None, repr=False, compare=False)
    _progress: Callable[[Job, Any], None] | None = field(default=None, repr=False, compare=False)
    #: Ends the job in the caller's transaction (``complete_in``): the runtime's, or None when
    #: the Job runs under no worker.
    _completion: Completion | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_row(
        cls,
        row: Any,
        worker: str = "",
        saver: Callable[[Job, Any], None] | None = None,
        payload: dict[str, Any] | None = None,
        cancel: Callable[[], CancelFlag] | None = None,
        parents: Callable[[int], dict[int, Any]] | None = None,
        steps: StepStore | None = None,
        progress: Callable[[Job, Any], None] | None = None,
        completion: Completion | None = None,
    ) -> Job:
        """``payload``: the row's payload brought to the task's current shape (default: as is);
        ``cancel``: gives the job's cancel flag (made when first asked for); ``parents``:
        reads the results of a job's parents; ``steps``: writes its steps and reads signals.

        Every field is set at once in the instance's ``__dict__``: a frozen dataclass's own
        ``__init__`` sets each of its 19 fields through ``object.__setattr__``, a third of a
        worker's Python per no-op job."""
        job = object.__new__(cls)
        job.__dict__.update(
            id=row.id,
            queue=row.queue,
            task=row.task,
            payload=row.payload if payload is None else payload,
            payload_version=row.payload_version,
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            key=row.key,
            priority=row.priority,
            run_at=row.run_at,
            checkpoint_data=row.checkpoint,
            worker=worker,
            batch_id=getattr(row, "batch_id", None),
            _save_checkpoint=saver,
            _cancel=cancel,
            _parents=parents,
            steps_data=getattr(row, "steps", None) or {},
            _step_store=steps,
            _steps=None,
            _progress=progress,
            _completion=completion,
        )
        return job

    @property
    def parent_results(self) -> dict[int, Any]:
        """Each parent's result by id (``after=``; read once, on first access). A parent that
        ended dead or cancelled (with ``on_dependency_failure="run"``) is absent."""
        cached = self.__dict__.get("_parent_results")
        if cached is None:
            cached = {} if self._parents is None else self._parents(self.id)
            object.__setattr__(self, "_parent_results", cached)
        return cached

    @property
    def cancelled(self) -> CancelFlag:
        """Set once an operator's cancel reaches this handler: ``if job.cancelled:`` or
        ``job.cancelled.wait(seconds)`` (a :class:`threading.Event` that is also a bool)."""
        if self._cancel is None:
            flag = CancelFlag()
            object.__setattr__(self, "_cancel", lambda: flag)
        return self._cancel()  # type: ignore[misc]

    def checkpoint(self, data: Any = ...) -> None:
        """Raise :class:`workerpool.Cancelled` if this job was asked to stop; then save durable
        progress (a JSON value) if ``data`` is given, fenced on this job's lease.

        ``job.checkpoint()`` with no data only checks for a cancel. Raises
        :class:`workerpool.model.errors.LeaseLost` if another process now owns the job.
        """
        if self.cancelled:
            from .errors import Cancelled

            raise Cancelled(f"job {self.id} was cancelled")
        if data is ...:
            return
        if self._save_checkpoint is None:
            raise RuntimeError("this Job is not attached to a worker; checkpoint() is unavailable")
        self._save_checkpoint(self, data)

    def progress(self, value: Any) -> None:
        """Report how far the handler got: a fraction within 0..1 or a small JSON object
        (``{"done": 4, "of": 10}``), shown on the job's page and by ``workerpool status --job``.

        Written at most once a second (the last report held back is written when the handler
        returns), fenced on this job's lease. Raises
        :class:`~workerpool.model.errors.InvalidProgress` for a bad value (nothing written)
        and :class:`~workerpool.model.errors.LeaseLost` when another process now owns the job.
        """
        if self._progress is None:
            from .progress import progress_json

            progress_json(value)  # checked all the same: the handler's tests see bad values
            return
        self._progress(self, value)

    # -- durable steps (workerpool.model.steps) -----------------------------------------------

    def step(self, name: str, fn: Callable[[], Any], *, conn: Any = None) -> Any:
        """Run ``fn()`` the first time and store its JSON result on the job, fenced on its lease;
        a later run of this job returns the stored value without calling ``fn``.

        With ``conn`` (a SQLAlchemy ``Connection`` or ORM ``Session`` on the pool's database,
        in the caller's open transaction) the step's record is written in that transaction:
        what ``fn`` wrote through ``conn`` and the record commit together, or neither.

        Raises :class:`~workerpool.model.errors.StepNameReused` for a name already used in this run,
        :class:`~workerpool.model.errors.PayloadError` for a result that is not JSON (or too large)
        and :class:`~workerpool.model.errors.LeaseLost` when the job is no longer this worker's
        (nothing is recorded then).
        """
        return self._run().step(name, fn, conn=conn)

    def complete_in(self, conn: Any, result: Any = None) -> None:
        """End this job ``done`` (with ``result``) in ``conn``'s open transaction, fenced on the
        lease: the caller's writes in that transaction and the completion commit together, or
        neither. ``conn``: a SQLAlchemy ``Connection`` or ORM ``Session`` on the pool's
        database. Once that transaction commits, the worker writes no outcome for this
        attempt; if it rolls back, the handler's return or raise decides as usual.

        Raises :class:`~workerpool.model.errors.CompletionLeaseLost` (a ``LeaseLost``) when the job
        is no longer this worker's, and :class:`~workerpool.model.errors.CompletionRefused` when
        called twice, after a cancel, outside a running handler, or on a connection not in a
        transaction or on another database; nothing is written then.
        """
        self._run().complete_in(conn, result)

    async def complete_in_async(self, conn: Any, result: Any = None) -> None:
        """:meth:`complete_in` on a SQLAlchemy ``AsyncConnection`` (or ``AsyncSession``)."""
        await conn.run_sync(lambda sync: self.complete_in(sync, result))

    async def step_async(self, name: str, coro_fn: Callable[[], Any], *, conn: Any = None) -> Any:
        """:meth:`step` for ``async def`` handlers: ``await job.step_async(name, coro_fn)``;
        ``conn``: a SQLAlchemy ``AsyncConnection`` (or ``AsyncSession``) whose transaction
        records the step."""
        return await self._run().step_async(name, coro_fn, conn=conn)

    def sleep(self, name: str, seconds: float) -> None:
        """The first time: leave the handler and run again in ``seconds``, holding no worker
        slot and spending no attempt. When the job runs again the sleep is a finished step and
        this returns at once."""
        self._run().sleep(name, seconds)

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """The payload of signal ``name`` (``pool.signal``). Until it is sent the job waits
        (state ``waiting``: no slot held, no attempt spent); past ``timeout`` seconds this
        raises :class:`TimeoutError` (in this run and every later one)."""
        return self._run().wait_for(name, timeout)

    def wait_for_job(self, job_id: int, timeout: float | None = None) -> Any:
        """The result of job ``job_id`` once it has ended, or its failure raised as
        ``pool.result`` raises it (:class:`~workerpool.model.errors.JobFailed`,
        :class:`~workerpool.model.errors.JobCancelled`). Until it ends this job waits (state
        ``waiting``: no slot held, no attempt spent) and runs again from the top when it does,
        its steps replayed; past ``timeout`` seconds this raises :class:`TimeoutError` (in
        this run and every later one). Enqueue the awaited job inside a :meth:`step`, so a
        run again awaits the same job instead of enqueuing another."""
        return self._run().wait_for_job(job_id, timeout)

    def _run(self) -> Steps:
        if self._steps is None:
            object.__setattr__(self, "_steps", Steps(self, self.steps_data, self._step_store))
        return self._steps  # type: ignore[return-value]


class Completion(Protocol):
    """The runtime's side of :meth:`Job.complete_in`: write ``done`` and ``result`` (JSON text
    or None) in ``conn``'s transaction, fenced on the job's lease; returns what followed
    (:class:`workerpool.sql.settled.Followed`) or raises a ``CompletionRefused``."""

    def __call__(self, job: Job, conn: Any, result: str | None) -> Any: ...


@dataclass(frozen=True)
class Lease:
    """Proof of ownership of a claimed row: who claimed it and on which attempt.

    Every write to a claimed row is fenced on it (:mod:`workerpool.sql.leases`): a process that
    lost its lease (reclaimed after it went stale, or released when its process died) no longer
    matches, and its late write changes nothing and reports so."""

    job_id: int
    attempt: int
    worker: str


class CancelFlag(threading.Event):
    """A cancel request as a handler sees it: an Event whose truth value is whether it is set."""

    def __bool__(self) -> bool:
        return self.is_set()


def new_worker_id() -> str:
    """A lease owner name unique per process boot: ``host:pid:random`` (pids get reused)."""
    import os
    import secrets
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
