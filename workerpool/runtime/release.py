"""Claims of processes that died: given back to the queue (or dead-lettered when exhausted).

The one release of a dead child's claims, wherever its death is learned:

- the parent reaps a child that did not drain: its worker id joins its slot's orphans
  (:mod:`workerpool.process.slots`), and the replacement child releases them first thing, before
  it claims (:func:`release_orphans`, from the worker's registration);
- children die during shutdown with nobody to replace them: the parent forks one short-lived
  releaser (:mod:`workerpool.process.releaser`), which runs :func:`release_dead_workers`;
- a host vanished with nobody left to say so: the stale recovery of any worker of its queues
  takes its rows once their leases are stale (``sql.recover_stale``).

Each row is attributed the same way (``sql.reclaim_from_dead_worker``, in
:mod:`workerpool.sql.recovery`): back to ``pending`` with the attempt spent, a suspect when its
worker held several, or ``dead/abandoned`` when exhausted, each with a ``WorkerLost`` entry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from .. import sql
from ..model.notices import CancelNotice, DeadNotice
from ..model.states import DeadReason, JobState
from ..sql import db
from ..sql.settled import after_rows

log = logging.getLogger("workerpool.orphans")


@dataclass
class Released:
    """What :func:`release_orphans` changed."""

    rows: int = 0
    #: The jobs that went ``dead/abandoned``: the caller reports them (log line, ``on_dead``
    #: hooks) once its transaction has committed.
    dead: list[DeadNotice] = field(default_factory=list)
    #: Their dependents cancelled with them: reported like any cancel (``on_cancel`` hooks).
    cancelled: list[CancelNotice] = field(default_factory=list)


def release_orphans(conn: Connection, worker_ids: Iterable[str]) -> Released:
    """Give back every row still ``processing`` under ``worker_ids`` and forget those workers."""
    released = Released()
    changed = []
    for worker in worker_ids:
        rows = sql.reclaim_from_dead_worker(conn, worker)
        changed += rows
        if rows:
            log.warning(
                "released %d job(s) of dead worker %s",
                len(rows),
                worker,
                extra={"event": "orphans_released", "worker": worker, "count": len(rows)},
            )
        sql.unregister_worker(conn, worker)
        released.rows += len(rows)
        released.dead += [
            DeadNotice.of(row, DeadReason.ABANDONED) for row in rows if row.state == JobState.DEAD
        ]
    # once, after every row: dead/abandoned (or cancelled) rows may end their batches
    released.cancelled = after_rows(conn, changed).cancelled
    return released


#: The releaser's limits: it must be done well inside the supervisor's release margin.
CONNECT_TIMEOUT = 2  # whole seconds (libpq)
STATEMENT_TIMEOUT = 2.0


def release_dead_workers(url: URL, worker_ids: Iterable[str], *, pooled: bool = False) -> Released:
    """:func:`release_orphans` in one bounded transaction on an engine of its own (2 s to
    connect, 2 s per statement and lock), for the releaser process. Raises on a database
    error: the stale recovery takes the rows later."""
    engine = db.create(
        url,
        application_name="workerpool releaser",
        pool_size=1,
        connect_timeout=CONNECT_TIMEOUT,
        pooled=pooled,
    )
    try:
        with engine.begin() as conn:
            sql.bound_transaction(
                conn,
                statement_timeout=STATEMENT_TIMEOUT,
                lock_timeout=STATEMENT_TIMEOUT,
                idle_timeout=STATEMENT_TIMEOUT,
            )
            return release_orphans(conn, worker_ids)
    finally:
        engine.dispose()
