"""The history duty: keep the history's partitions (created ahead, dropped whole past the
retention) and move finished rows into them, a batch per transaction, counting each minute's
(docs/storage.md).

One replica at a time does either (``sql.history.try_lock``); the others skip their turn. Every
step is one short transaction, safe to cut at any instant: a partition is created or dropped
whole, a batch moves whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime

from sqlalchemy import Connection

from ...model import history as layout
from ...model.specs import MaintenanceSpec
from ...sql import database_now
from ...sql import history as store

log = logging.getLogger("workerpool.maintenance")


class HistoryKeeper:
    """``tick()`` once per maintenance pass; ``transaction`` opens one bounded transaction."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[Connection]],
        settings: MaintenanceSpec,
        kept_tasks: Iterable[str] = (),
    ) -> None:
        self.transaction = transaction
        self.settings = settings
        self.kept_tasks = sorted(kept_tasks)
        self.floor: datetime | None = None  # the oldest instant a moved row may have

    def tick(self) -> int:
        """Keep the partitions, then move up to ``prune_batches_per_pass`` batches; returns the
        rows moved (0 when history is off or another replica holds the lock)."""
        if not self.settings.history or not self.keep_partitions():
            return 0
        moved = 0
        for _ in range(self.settings.prune_batches_per_pass):
            count = self.move_batch()
            moved += count
            if count < self.settings.history_batch:
                break
        if moved:
            log.info(
                "moved %d finished jobs to the history",
                moved,
                extra={"event": "jobs_moved", "count": moved},
            )
        return moved

    def keep_partitions(self) -> bool:
        """Create the missing partitions, drop the expired ones and their minutes' counts;
        False: another replica holds the lock."""
        s = self.settings
        with self.transaction() as conn:
            if not store.try_lock(conn):
                return False
            plan = layout.plan(
                store.partitions(conn),
                database_now(conn),
                retention=s.retention,
                width=s.history_partition_days,
                ahead=s.history_ahead,
            )
            for part in plan.drop:
                store.drop_partition(conn, part)
            for part in plan.create:
                store.create_partition(conn, part)
            store.prune_minutes(conn, s.retention)
        self.floor = plan.floor
        for part in plan.drop:
            log.info(
                "dropped history partition %s (finished before %s)",
                part.name,
                part.upper.isoformat(),
                extra={"event": "history_dropped", "partition": part.name},
            )
        return True

    def move_batch(self) -> int:
        assert self.floor is not None
        with self.transaction() as conn:
            if not store.try_lock(conn):
                return 0
            return store.move(
                conn,
                floor=self.floor,
                delay=self.settings.history_delay,
                limit=self.settings.history_batch,
                kept=self.kept_tasks,
            )
