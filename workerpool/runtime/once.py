"""Effects that happen once: a handler's own transaction ends its job (``job.complete_in``) or
records a step (``job.step(conn=)``), fenced on the lease, and the outcome the runner then writes.

The caller's transaction is theirs: this module writes into it and never commits it. Once the
handler has returned, the runner asks the database whether that transaction committed the
``done`` (:func:`settle_outcome`): if so the attempt's outcome is ``committed`` and nothing more
is written for it; if it rolled back, the handler's return or raise decides, as if
``complete_in`` had never been called.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection

from ..model.attempt import Outcome
from ..model.errors import CompletionLeaseLost, CompletionRefused
from ..model.job import Job, Lease
from ..model.states import OutcomeKind
from ..sql import once, steps
from ..sql.settled import Followed

#: A short transaction of the runner's own (the worker's bounded one, or the engine's).
Transaction = Callable[[], AbstractContextManager[Connection]]


def connection_of(conn: Any, job_id: int) -> Connection:
    """The SQLAlchemy ``Connection`` behind ``conn`` (a Connection or an ORM Session), which
    must be inside an open transaction; anything else is refused before anything is written."""
    session_connection = getattr(conn, "connection", None)
    if not isinstance(conn, Connection) and callable(session_connection):
        if not conn.in_transaction():
            raise CompletionRefused(f"job {job_id}: the Session is not in a transaction")
        conn = session_connection()
    if hasattr(conn, "sync_connection"):
        raise CompletionRefused(
            f"job {job_id}: an AsyncConnection needs complete_in_async (or step in run_sync)"
        )
    if not isinstance(conn, Connection):
        raise CompletionRefused(
            f"job {job_id}: conn must be a SQLAlchemy Connection or Session,"
            f" got {type(conn).__name__}"
        )
    if not conn.in_transaction():
        raise CompletionRefused(
            f"job {job_id}: conn is not in a transaction (use `with engine.begin() as conn:`)"
        )
    return conn


class Once:
    """The completion and the in-transaction step record of one runner (a worker process or
    the inline runner): ``worker`` is its lease owner, ``transaction`` a short transaction of
    its own, used only to explain a refusal."""

    def __init__(
        self,
        worker: str,
        transaction: Transaction,
        on_complete: Callable[[int], None] = lambda job_id: None,
    ) -> None:
        self.worker, self.transaction, self.on_complete = worker, transaction, on_complete
        self._identity: tuple[Any, ...] | None = None

    def __call__(self, job: Job, conn: Any, result: str | None) -> Followed:
        """``job.complete_in``'s write (:class:`workerpool.model.job.Completion`)."""
        sync = self.checked(conn, job)
        followed = once.complete_in(sync, self.lease(job), result)
        if followed is None:
            raise self.refusal(sync, job)
        self.on_complete(job.id)
        return followed

    def record_in(
        self, conn: Any, job: Any, name: str, kind: str, value: str, elapsed: float
    ) -> dict[str, Any] | None:
        """``job.step(conn=)``: the step's record in the caller's transaction."""
        sync = self.checked(conn, job)
        return steps.record_step(sync, self.lease(job), name, kind, value, elapsed)

    def lease(self, job: Any) -> Lease:
        return Lease(job.id, job.attempt, self.worker)

    def checked(self, conn: Any, job: Any) -> Connection:
        """``conn``'s Connection, refused unless it is in a transaction on the runner's own
        server and database (asked once per database connection: it never changes)."""
        sync = connection_of(conn, job.id)
        identity = sync.info.get(_IDENTITY)
        if identity is None:
            identity = sync.info[_IDENTITY] = once.database_identity(sync)
        if identity != self.identity():
            raise CompletionRefused(f"job {job.id}: conn is on another database than the pool's")
        return sync

    def identity(self) -> tuple[Any, ...]:
        if self._identity is None:
            with self.transaction() as own:
                self._identity = once.database_identity(own)
        return self._identity

    def refusal(self, conn: Connection, job: Job) -> CompletionRefused:
        """Why the fenced completion wrote nothing, as the exception to raise."""
        now = once.holder(conn, job.id)
        if now is not None and now.cancel_asked and now.claimed_by == self.worker:
            return CompletionRefused(f"job {job.id} was cancelled; not completed")
        return CompletionLeaseLost(
            f"job {job.id}: lease lost, not completed (now {now.state if now else 'gone'});"
            " roll back the effect"
        )


#: Where a database connection's identity (server, database) is kept in its ``info``.
_IDENTITY = "workerpool_identity"


def settle_outcome(
    outcome: Outcome, job: Job | None, transaction: Transaction, lease: Lease
) -> Outcome:
    """The attempt's outcome once its handler returned: ``committed`` when ``complete_in``
    wrote ``done`` in a transaction that committed, else ``outcome`` unchanged. A job that
    never called ``complete_in`` costs nothing here (no round trip)."""
    run = None if job is None else job._steps
    if run is None:
        return outcome
    run.ended = True
    if run.completed is None:
        return outcome
    with transaction() as conn:
        if not once.committed(conn, lease):
            return outcome
    return Outcome(OutcomeKind.COMMITTED, followed=run.completed)
