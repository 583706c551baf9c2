"""Pause and resume a queue on every replica: a row in ``workerpool_queues``.

Workers read their queue's row at most once per poll interval, and a notification makes them
read it at once; a paused queue's workers claim nothing, keep renewing the leases of the jobs
still running, and keep ticking (a paused queue is healthy). Enqueue is not affected.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy import Connection

from .. import sql
from ..client import WorkerPool
from ..model.errors import UnknownQueue
from ..model.validation import check_name
from .dead import LIVE_WORKER_WINDOW, default_actor

log = logging.getLogger("workerpool.pause")


def set_paused(pool: WorkerPool, queue: str, paused: bool, *, by: str | None = None,
               known: Iterable[str] | None = None) -> None:
    """Pause (or resume) ``queue``; an unknown queue raises UnknownQueue naming the known ones.

    Known queues: ``known`` if given, else the pool's declared queues, else the queues live
    workers serve or that have rows.
    """
    try:
        check_name("queue", queue)
    except ValueError as exc:
        raise UnknownQueue(str(exc)) from None
    by = by or default_actor()
    with pool.engine.begin() as conn:
        names = set(known) if known is not None else known_queues(pool, conn)
        if queue not in names:
            raise UnknownQueue(f"unknown queue {queue!r}; known queues: "
                               f"{', '.join(sorted(names)) or '(none)'}")
        sql.set_paused(conn, queue, paused, by)
    verb = "paused" if paused else "resumed"
    log.info("queue %s %s by %s", queue, verb, by,
             extra={"event": f"queue_{verb}", "queue": queue, "by": by})


def known_queues(pool: WorkerPool, conn: Connection) -> set[str]:
    """The pool's declared queues, else the queues with live workers, rows or a state row."""
    if pool.queues:
        return set(pool.queues)
    live = {row.queue for row in sql.list_workers(conn)
            if row.age <= LIVE_WORKER_WINDOW and not row.queue.startswith("@")}
    states = {row.queue for row in sql.list_queue_states(conn)}
    return live | states | sql.known_queues(conn)
