"""Cancel jobs: queued ones end ``cancelled`` at once, running ones are asked to stop.

A ``pending`` or ``failed`` job is cancelled in the same statement that decides it (see
:mod:`workerpool.queries.control` for the race with a claim). A ``processing`` job gets a cancel
request and its owner is notified; the owner also reads requests back when it renews its
leases, which is the path behind PgBouncer. The row ends ``cancelled`` with who asked, when and
why in its history once the handler returns, raises, or ignores the request for ``cancel_grace``
seconds. Every job cancelled is logged and passed to each ``pool.on_cancel`` hook.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, event

from .. import sql
from ..client import WorkerPool
from ..model.errors import InvalidFilter, UnknownJob
from ..model.states import LIVE_STATES, JobState
from .dead import check_filter, check_ids, default_actor

log = logging.getLogger("workerpool.cancel")

CANCELLED = "cancelled"  # it was queued: cancelled now
STOPPING = "asked to stop"  # it runs: its worker stops it
FINISHED = "already finished"  # done, dead or cancelled before: nothing changed


@dataclass(frozen=True)
class CancelNotice:
    """One job that just ended ``cancelled``: what the log line and ``on_cancel`` hooks get."""

    id: int
    queue: str
    task: str
    attempts: int
    by: str = ""
    reason: str = ""


@dataclass(frozen=True)
class CancelResult:
    """Per job id what the cancel did (or, with ``dry_run``, would do), and its state then."""

    verdicts: dict[int, str]
    states: dict[int, str]
    dry_run: bool = False
    by: str = ""

    def ids(self, verdict: str) -> list[int]:
        return [job_id for job_id, seen in self.verdicts.items() if seen == verdict]

    @property
    def cancelled(self) -> list[int]:
        return self.ids(CANCELLED)

    @property
    def stopping(self) -> list[int]:
        return self.ids(STOPPING)

    @property
    def finished(self) -> list[int]:
        return self.ids(FINISHED)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "by": self.by,
                "jobs": [{"id": job_id, "verdict": verdict, "state": self.states.get(job_id)}
                         for job_id, verdict in self.verdicts.items()]}


@dataclass(frozen=True)
class Selection:
    """Which jobs: explicit ids, or a queue's live jobs (optionally one task, one state)."""

    ids: tuple[int, ...] | None = None
    queue: str | None = None
    task: str | None = None
    state: str | None = None

    def __post_init__(self) -> None:
        if (self.ids is None) == (self.queue is None):
            raise InvalidFilter("give job ids or a queue (with optional task and state),"
                                " not both and not neither")
        if self.ids is not None:
            object.__setattr__(self, "ids", check_ids(self.ids))
        elif self.queue is not None:
            check_filter("queue", self.queue)
        if self.ids is None and self.task is not None:
            check_filter("task", self.task)
        if self.ids is not None and (self.task or self.state):
            raise InvalidFilter("task and state filters go with a queue, not with job ids")
        if self.state is not None and self.state not in LIVE_STATES:
            raise InvalidFilter(f"state must be one of {', '.join(LIVE_STATES)} (the states a"
                                f" job can be cancelled in); got {self.state!r}")

    def resolve(self, conn: Connection) -> dict[int, str]:
        """The selected jobs and their states; unknown ids are refused by name."""
        if self.ids is None:
            ids = sql.select_ids(conn, self.queue, self.task, self.state)
            return sql.job_states(conn, ids) if ids else {}
        states = sql.job_states(conn, self.ids)
        unknown = [job_id for job_id in self.ids if job_id not in states]
        if unknown:
            listing = ", ".join(str(job_id) for job_id in unknown)
            raise UnknownJob(f"unknown job id(s): {listing}; nothing was changed")
        return {job_id: states[job_id] for job_id in self.ids}


def cancel(pool: WorkerPool, selection: Selection, *, conn: Connection | None = None,
           reason: str | None = None, by: str | None = None,
           dry_run: bool = False) -> CancelResult:
    """Cancel the selected jobs (see the module docstring); ``conn``: in the caller's
    transaction (the running jobs' owners are notified when it commits)."""
    if reason is not None and not isinstance(reason, str):
        raise InvalidFilter(f"reason must be a string, got {type(reason).__name__}")
    by = by or default_actor()
    with _connection(pool, conn) as db:
        before = selection.resolve(db)
        if dry_run or not before:
            return CancelResult({i: _verdict(s) for i, s in before.items()}, before, True, by)
        changed = sql.cancel(db, list(before), by, reason)
        _notify_owners(db, changed)
        result = _result(db, before, changed, by)
    notices = [CancelNotice(row.id, row.queue, row.task, row.attempts, by, reason or "")
               for row in changed if row.state == JobState.CANCELLED]
    if conn is None or not conn.in_transaction():
        report_cancelled(pool, notices)
    else:
        _report_on_commit(pool, conn, notices)
    return result


def _report_on_commit(pool: WorkerPool, conn: Connection, notices: list[CancelNotice]) -> None:
    """In the caller's transaction: report when it commits, never when it rolls back.

    SQLAlchemy Core has no after-commit event; ``commit`` fires as the COMMIT is sent, after
    the last statement, so only a COMMIT the server refuses could still undo a reported cancel.
    """
    if not notices:
        return
    pending = [notices]

    def committed(_conn: Connection) -> None:
        if pending:
            report_cancelled(pool, pending.pop())

    def rolled_back(_conn: Connection) -> None:
        pending.clear()

    event.listen(conn, "commit", committed, once=True)
    event.listen(conn, "rollback", rolled_back, once=True)


@contextmanager
def _connection(pool: WorkerPool, conn: Connection | None):
    if conn is not None:
        yield conn
        return
    with pool.engine.begin() as own:
        yield own


def _verdict(state: str) -> str:
    if state in (JobState.PENDING, JobState.FAILED):
        return CANCELLED
    return STOPPING if state == JobState.PROCESSING else FINISHED


def _notify_owners(conn: Connection, changed: Iterable[Any]) -> None:
    owners: dict[str, list[int]] = {}
    for row in changed:
        if row.state == JobState.PROCESSING:
            owners.setdefault(row.claimed_by, []).append(row.id)
    for owner, ids in owners.items():
        sql.notify_cancel(conn, owner, ids)


def _result(conn: Connection, before: Mapping[int, str], changed: list[Any],
            by: str) -> CancelResult:
    states = {row.id: row.state for row in changed}
    verdicts = {job_id: CANCELLED if state == JobState.CANCELLED else STOPPING
                for job_id, state in states.items()}
    rest = [job_id for job_id in before if job_id not in states]
    if rest:  # finished meanwhile, or asked to stop before
        states.update(sql.job_states(conn, rest))
    verdicts.update((job_id, _verdict(states[job_id])) for job_id in rest)
    return CancelResult({i: verdicts[i] for i in before}, {i: states[i] for i in before},
                        False, by)


def report_cancelled(pool: WorkerPool, notices: Iterable[CancelNotice]) -> None:
    """Log one line per cancelled job and call each ``pool.on_cancel`` hook (never raises)."""
    for notice in notices:
        log.info("job cancelled: queue=%s id=%s task=%s by=%s reason=%s", notice.queue,
                 notice.id, notice.task, notice.by, notice.reason or "-",
                 extra={"event": "job_cancelled", "job_id": notice.id, "queue": notice.queue,
                        "task": notice.task})
        for hook in list(pool.on_cancel):
            try:
                hook(notice)
            except Exception:
                log.exception("on_cancel hook %s failed for job %s",
                              getattr(hook, "__name__", hook), notice.id,
                              extra={"event": "on_cancel_hook_failed", "job_id": notice.id})
