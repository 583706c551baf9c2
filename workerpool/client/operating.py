"""What an operator (or an application acting as one) does to live work: cancel jobs, pause
and resume a queue, change cron schedules at run time, rerun a job that ended, send a signal.
Each call is audited; :class:`~workerpool.client.WorkerPool` inherits them from
:class:`OperatorCalls`, as it does its asyncio twins from :mod:`workerpool.client.asynchronous`."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection

from .. import sql
from ..model.cancel import CancelResult, Selection, check_reason
from ..model.errors import InvalidSignal, SignalExists, UnknownQueue
from ..model.notices import CancelNotice, report_cancelled
from ..model.payload import dumps
from ..model.states import LIVE_WORKER_WINDOW, JobState
from ..model.steps import check_name as check_step_name
from ..model.validation import check_name
from ..sql import audit, signals
from . import cancelling, crons, reruns
from .acting import actor
from .explained import explained

if TYPE_CHECKING:
    from . import WorkerPool

pause_log = logging.getLogger("workerpool.pause")


class OperatorCalls:
    """What :class:`~workerpool.client.WorkerPool` offers to steer live work."""

    @property
    def _pool(self) -> WorkerPool:
        return cast("WorkerPool", self)  # a mixin of WorkerPool, and of nothing else

    # -- cancel, pause and resume --------------------------------------------------------------

    @explained
    def cancel(
        self,
        ids: Iterable[int] | None = None,
        *,
        conn: Connection | None = None,
        reason: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        state: str | None = None,
        dry_run: bool = False,
        by: str | None = None,
        tags: Iterable[str] | None = None,
    ) -> CancelResult:
        """Cancel jobs by id (or a queue's, with optional ``task``/``state``): a queued job ends
        ``cancelled`` now, a running one is asked to stop. Returns a ``CancelResult`` saying per
        id what happened; an unknown id raises UnknownJob and changes nothing.

        With ``conn=`` it runs in the caller's transaction: the running jobs' owners are told,
        and the ``on_cancel`` hooks run, when it commits. A queued job is cancelled in the same
        statement that decides it (see :mod:`workerpool.sql.control` for the race with a
        claim); a running one's owner also reads requests back as it renews its leases, which
        is the path behind PgBouncer. ``tags``: the live jobs carrying every one of these
        (alone or with ``queue``)."""
        selection = Selection(
            tuple(ids) if ids is not None else None, queue, task, state, cancelling.tag_list(tags)
        )
        reason = check_reason(reason)
        by = actor(by)
        with self._pool._connection(conn) as db:
            before = cancelling.selected(db, selection)
            if dry_run or not before:
                return CancelResult.planned(before, by)
            changed, dependents = sql.cancel(db, list(before), by, reason)
            audit.record(
                db,
                by,
                "cancel",
                cancelling.target(selection),
                {
                    "count": len(before),
                    "ids": sorted(before)[: audit.AUDIT_IDS],
                    "reason": reason,
                    "task": selection.task,
                    "state": selection.state,
                    "tags": list(selection.tags) if selection.tags else None,
                },
            )
            sql.notify_owners(db, changed)
            states = {row.id: row.state for row in changed}
            rest = [job_id for job_id in before if job_id not in states]
            others = {job_id: before[job_id] for job_id in rest} | (
                sql.job_states(db, rest) if rest else {}
            )
        notices = [
            CancelNotice(row.id, row.queue, row.task, row.attempts, by, reason or "")
            for row in changed
            if row.state == JobState.CANCELLED
        ] + dependents
        if conn is None or not conn.in_transaction():
            report_cancelled(self._pool.on_cancel, notices)
        else:
            cancelling.report_on_commit(
                conn, lambda: report_cancelled(self._pool.on_cancel, notices)
            )
        return CancelResult.done(before, states, others, by)

    def pause(
        self,
        queue: str,
        *,
        by: str | None = None,
        known: Iterable[str] | None = None,
        conn: Connection | None = None,
    ) -> None:
        """Stop every replica claiming from ``queue`` (running jobs finish; enqueue works).

        Workers read their queue's row at most once per poll interval, and a notification
        makes them read it at once; a paused queue's workers claim nothing, keep renewing the
        leases of the jobs still running, and keep ticking (a paused queue is healthy).
        ``conn=``: in the caller's transaction."""
        self._set_paused(queue, True, by, known, conn)

    def resume(
        self,
        queue: str,
        *,
        by: str | None = None,
        known: Iterable[str] | None = None,
        conn: Connection | None = None,
    ) -> None:
        """Let every replica claim from ``queue`` again."""
        self._set_paused(queue, False, by, known, conn)

    def _set_paused(
        self,
        queue: str,
        paused: bool,
        by: str | None,
        known: Iterable[str] | None,
        conn: Connection | None = None,
    ) -> None:
        """An unknown queue raises UnknownQueue naming the known ones: ``known`` if given, else
        the declared queues, else the queues live workers serve or that have rows."""
        try:
            check_name("queue", queue)
        except ValueError as exc:
            raise UnknownQueue(str(exc)) from None
        by = actor(by)
        with self._pool._connection(conn) as db:
            names = (
                set(known)
                if known is not None
                else (set(self._pool.queues) or sql.queue_names(db, LIVE_WORKER_WINDOW))
            )
            if queue not in names:
                raise UnknownQueue(
                    f"unknown queue {queue!r}; known queues: {', '.join(sorted(names)) or '(none)'}"
                )
            sql.set_paused(db, queue, paused, by)
            audit.record(db, by, "pause" if paused else "resume", f"queue:{queue}")
        verb = "paused" if paused else "resumed"
        pause_log.info(
            "queue %s %s by %s",
            queue,
            verb,
            by,
            extra={"event": f"queue_{verb}", "queue": queue, "by": by},
        )

    # -- cron schedules at run time (workerpool.client.crons) ------------------------------------

    def cron_pause(self, name: str, *, by: str | None = None) -> None:
        """Pause cron ``name`` on every replica: its ticks pass without a job until resumed
        (a restart keeps it paused). UnknownCron names the known ones; nothing is written."""
        with self._pool.engine.begin() as conn:
            crons.set_paused(self._pool.registry, conn, name, True, actor(by))

    def cron_resume(self, name: str, *, by: str | None = None) -> None:
        """Resume cron ``name``: its next tick after now runs (no catch-up of paused ticks)."""
        with self._pool.engine.begin() as conn:
            crons.set_paused(self._pool.registry, conn, name, False, actor(by))

    def cron_run(self, name: str, *, by: str | None = None, request: str | None = None) -> int:
        """Enqueue one job of cron ``name`` now (payload ``tick``: now, ``manual``: True) and
        return its id. ``request``: an id of this request (default: a fresh one); the same id
        again returns the same job. The cron must be declared in this pool."""
        with self._pool.engine.begin() as conn:
            return crons.run_now(self._pool.registry, conn, name, actor(by), request)

    def cron_add(
        self,
        name: str,
        expression: str,
        *,
        task: str,
        payload: Any = None,
        queue: str | None = None,
        timezone: str = "UTC",
        by: str | None = None,
    ) -> None:
        """Add cron schedule ``name`` at run time (no deploy): each tick of ``expression`` (in
        ``timezone``) enqueues one job of ``task`` with ``payload`` plus its ``tick``, once
        across replicas; every running scheduler picks it up within a pass. The same name again
        changes an added schedule. Refused, nothing written: ``CronDeclared`` for a name
        declared in code, ``ConfigError`` for a bad name, expression, timezone or queue,
        ``UnknownTask``, ``PayloadError``."""
        with self._pool.engine.begin() as conn:
            crons.add(
                self._pool.registry,
                conn,
                name,
                expression,
                task=task,
                payload=payload,
                queue=queue,
                timezone=timezone,
                by=actor(by),
            )

    def cron_remove(self, name: str, *, by: str | None = None) -> None:
        """Remove a schedule added with :meth:`cron_add`; its ticks stop within a pass.
        ``CronDeclared`` for one declared in code, ``UnknownCron`` for a name nobody added."""
        with self._pool.engine.begin() as conn:
            crons.remove(self._pool.registry, conn, name, actor(by))

    # -- reruns (workerpool.client.reruns) --------------------------------------------------------

    def rerun(
        self, job_id: int, from_step: str | None = None, *, by: str | None = None
    ) -> list[str]:
        """Run job ``job_id`` again: a ``done``, ``dead`` or ``cancelled`` job goes back in line
        (attempts reset, the rerun in its history and the audit trail), keeping the durable
        steps it recorded before ``from_step`` (None: none kept). Returns the names of the
        steps dropped, in run order. Refused, nothing written: ``UnknownJob``, ``JobLive`` (it
        has not ended), ``UnknownStep`` (a step it never recorded: the message lists its
        steps), ``WrongState`` (a batch member, a parent not done, its key held anew)."""
        with self._pool.engine.begin() as conn:
            return reruns.rerun(self._pool.registry, conn, job_id, from_step, actor(by)).dropped

    # -- signals (workerpool.sql.signals; job.wait_for) ------------------------------------------

    @explained
    def signal(self, name: str, payload: Any = None, *, conn: Connection | None = None) -> datetime:
        """Send signal ``name`` with ``payload`` (any JSON value, checked like a payload): the
        jobs waiting for it in ``job.wait_for(name)`` are due again at once and get the
        payload; a job that starts waiting later gets it too (the signal is kept). Returns
        when it was sent (the database clock).

        The first signal of a name stands: a second raises SignalExists (with the kept
        payload) and writes nothing. With ``conn=`` it runs in the caller's transaction: the
        signal exists, and its waiters wake, iff that transaction commits."""
        check_step_name(name, "signal", InvalidSignal)
        text = dumps(
            payload,
            limit=self._pool.registry.payload_limit,
            what=f"signal {name!r}",
            object_only=False,
        )
        with self._pool._connection(conn) as db:
            sent_at, woken = signals.send(db, name, text)
            if sent_at is None:
                kept = signals.get(db, name)
                raise SignalExists(name, kept.payload, kept.sent_at)
        self._pool._enqueued(conn, list(woken))
        return sent_at
