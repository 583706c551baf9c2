"""Claims of processes that died: given back to the queue (or dead-lettered when exhausted).

One function for every place that learns of a dead process: a replacement child at boot (its
predecessors) and the supervisor's releaser at shutdown. The stale recovery
(``sql.recover_stale``) covers a host that vanished with nobody left to say so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Connection

from .. import sql
from ..model.states import DeadReason, JobState
from ..ops.dead import DeadNotice

log = logging.getLogger("workerpool.orphans")


@dataclass
class Released:
    """What :func:`release_orphans` changed."""

    rows: int = 0
    #: The jobs that went ``dead/abandoned``: the caller reports them (log line, ``on_dead``
    #: hooks) once its transaction has committed.
    dead: list[DeadNotice] = field(default_factory=list)


def release_orphans(conn: Connection, worker_ids: Iterable[str]) -> Released:
    """Give back every row still ``processing`` under ``worker_ids`` and forget those workers."""
    released = Released()
    for worker in worker_ids:
        rows = sql.reclaim_from_dead_worker(conn, worker)
        if rows:
            log.warning("released %d job(s) of dead worker %s", len(rows), worker,
                        extra={"event": "orphans_released", "worker": worker,
                               "count": len(rows)})
        sql.unregister_worker(conn, worker)
        released.rows += len(rows)
        released.dead += [DeadNotice.of(row, DeadReason.ABANDONED)
                          for row in rows if row.state == JobState.DEAD]
    return released
