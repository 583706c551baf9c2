"""The store of a running job's durable steps (:class:`workerpool.model.steps.StepStore`):
a finished step written fenced on the lease, and a signal read, each in a short transaction of
its own on the handler's thread (the worker's, or the inline runner's)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection

from ..model.awaits import AwaitedRead
from ..model.job import Lease
from ..model.steps import SignalRead
from ..sql import awaits, signals, steps
from .once import Once


class StepStore:
    """``transaction()``: a short transaction (the worker's bounded one off the main loop).
    ``once``: the writes in a handler's own transaction (``complete_in``, ``step(conn=)``);
    ``on_complete`` is told the job ids whose ``complete_in`` wrote."""

    def __init__(
        self,
        worker: str,
        payload_limit: int,
        transaction: Callable[[], AbstractContextManager[Connection]],
        on_complete: Callable[[int], None] = lambda job_id: None,
    ) -> None:
        self.worker, self.payload_limit, self.transaction = worker, payload_limit, transaction
        self.once = Once(worker, transaction, on_complete)

    def record(
        self, job: Any, name: str, kind: str, value: str, elapsed: float, timed_out: bool = False
    ) -> dict[str, Any] | None:
        lease = Lease(job.id, job.attempt, self.worker)
        with self.transaction() as conn:
            return steps.record_step(conn, lease, name, kind, value, elapsed, timed_out=timed_out)

    def record_in(
        self, conn: Any, job: Any, name: str, kind: str, value: str, elapsed: float
    ) -> dict[str, Any] | None:
        return self.once.record_in(conn, job, name, kind, value, elapsed)

    def signal(self, name: str, deadline: str | None) -> SignalRead:
        with self.transaction() as conn:
            return signals.read_signal(conn, name, deadline)

    def awaited(self, job_id: int, deadline: str | None) -> AwaitedRead:
        with self.transaction() as conn:
            return awaits.read_awaited(conn, job_id, deadline)

    def limit(self) -> int:
        return self.payload_limit
