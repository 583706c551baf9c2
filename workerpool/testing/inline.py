"""Inline mode: every enqueue runs its job in this process, right after the enqueuing
transaction commits (or at once without one), never inside it.

The job has to be committed before it runs: its handler may read what the enqueuing
transaction wrote, and a rollback must leave nothing to run. SQLAlchemy's ``commit`` event on
the caller's Connection fires just before the DBAPI commit, so the listener commits the DBAPI
connection itself (the same commit, taken a moment earlier; SQLAlchemy's own then has nothing
left to do), and then drains the queues the new jobs are in. A rollback disarms it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Connection, event

from .. import sql
from ..model.errors import ConfigError
from .runner import drain

MODES = ("inline", None)


def set_mode(pool: Any, mode: str | None) -> AbstractContextManager[Any]:
    """Switch ``pool`` to ``mode`` now; the returned context manager switches it back."""
    if mode not in MODES:
        raise ConfigError(f"testing mode must be one of {MODES}, got {mode!r}")
    previous = pool._inline
    pool._inline = InlineRunner(pool) if mode == "inline" else None
    return _restore(pool, previous)


@contextmanager
def _restore(pool: Any, previous: Any) -> Iterator[Any]:
    try:
        yield pool
    finally:
        pool._inline = previous


class InlineRunner:
    """Called by the pool after each enqueue, with the caller's connection (or None) and the
    ids it wrote."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.running = threading.local()

    def __call__(self, conn: Any, ids: list[int]) -> None:
        sync = getattr(conn, "sync_connection", conn)  # an AsyncConnection's own Connection
        if isinstance(sync, Connection) and sync.in_transaction():
            _AfterCommit(self, sync, ids)
        else:
            self.run(ids)

    def run(self, ids: list[int]) -> None:
        """Drain the queues of the jobs ``ids`` (committed by now). Jobs that a handler enqueues
        meanwhile are queued up here and run by this drain once it is done, not a nested one."""
        pending = getattr(self.running, "pending", None)
        if pending is not None:
            pending.extend(ids)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._drain(ids)
            return
        # Inside an event loop (enqueue_async): an async handler needs a loop of its own.
        thread = threading.Thread(target=self._drain, args=(ids,), name="workerpool-inline")
        thread.start()
        thread.join()

    def _drain(self, ids: list[int]) -> None:
        self.running.pending = pending = list(ids)
        try:
            while pending:
                with self.pool.engine.connect() as conn:
                    queues = sql.job_queues(conn, pending)
                pending.clear()
                for queue in queues:
                    drain(self.pool, queue)
        finally:
            self.running.pending = None


class _AfterCommit:
    """One armed listener on one caller Connection: fires on its commit, disarmed by rollback."""

    def __init__(self, runner: InlineRunner, conn: Connection, ids: list[int]) -> None:
        self.runner, self.ids, self.armed = runner, ids, True
        event.listen(conn, "commit", self.on_commit)
        event.listen(conn, "rollback", self.on_rollback)

    def on_commit(self, conn: Connection) -> None:
        if not self.armed:
            return
        self.armed = False
        conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]
        self.runner.run(self.ids)

    def on_rollback(self, conn: Connection) -> None:
        self.armed = False
