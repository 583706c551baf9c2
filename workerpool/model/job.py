"""A claimed job: the frozen view a handler receives (:class:`Job`) and the lease its worker
holds on the row (:class:`Lease`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
    _parents: Callable[[int], dict[int, Any]] | None = field(default=None, repr=False,
                                                             compare=False)

    @classmethod
    def from_row(cls, row: Any, worker: str = "", saver: Callable[[Job, Any], None] | None = None,
                 payload: dict[str, Any] | None = None,
                 cancel: Callable[[], CancelFlag] | None = None,
                 parents: Callable[[int], dict[int, Any]] | None = None) -> Job:
        """``payload``: the row's payload brought to the task's current shape (default: as is);
        ``cancel``: gives the job's cancel flag (made when first asked for); ``parents``:
        reads the results of a job's parents."""
        return cls(
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
        )

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
        :class:`workerpool.errors.LeaseLost` if another process now owns the job.
        """
        if self.cancelled:
            from .errors import Cancelled

            raise Cancelled(f"job {self.id} was cancelled")
        if data is ...:
            return
        if self._save_checkpoint is None:
            raise RuntimeError("this Job is not attached to a worker; checkpoint() is unavailable")
        self._save_checkpoint(self, data)


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
