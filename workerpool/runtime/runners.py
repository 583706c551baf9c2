"""What a forked child runs: a queue's ``Worker``, or the maintenance loop.

:func:`build_runner` is the ``runner_factory`` of :class:`workerpool.process.child.Child`,
bound to the application's registry and database URL by whoever builds the supervisor
(``workerpool run``). It runs in the child after the fork; this module is imported in the parent
before its first fork, so a replacement child costs a fork, not the import of the database
stack (a few hundred milliseconds), and a queue whose child was killed is serving again at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from sqlalchemy.engine import URL

from ..model.registry import Registry
from ..model.specs import QueueSpec, WorkerKind, WorkerType
from ..sql import db
from .maintenance import Maintenance, MaintenanceLoop
from .worker import Worker


class Runner(Protocol):
    def run(self) -> int: ...
    def stop(self) -> None: ...
    def stop_now(self) -> None: ...


def build_runner(
    registry: Registry,
    url: URL,
    worker: WorkerType,
    *,
    worker_id: str,
    on_tick: Callable[[], None],
    parent_alive: Callable[[], bool],
    orphans: tuple[str, ...],
    on_claim: Callable[[], None] | None = None,
    queues: Mapping[str, QueueSpec] | None = None,
    pooled: bool = False,
    read_url: URL | None = None,
) -> Runner:
    """The maintenance loop, or a Worker on its queue with the settings loaded for it.

    ``queues``: every queue's settings for this run (what the maintenance sweep uses; default:
    as declared); a queue's own worker runs with ``worker.spec``. ``pooled``: behind PgBouncer.
    ``read_url``: a replica the maintenance child samples the queues' depth on.
    """
    if worker.kind == WorkerKind.MAINTENANCE:
        reads = (
            db.create(read_url, application_name="workerpool-read", pool_size=1, pooled=pooled)
            if read_url is not None
            else None
        )
        maintenance = Maintenance(
            registry,
            db.create(url, pooled=pooled),
            worker_id=worker_id,
            queues=queues,
            pooled=pooled,
            read_engine=reads,
        )
        return MaintenanceLoop(maintenance, on_tick=on_tick, parent_alive=parent_alive)
    return Worker(
        registry,
        url,
        worker.queue,
        spec=worker.spec,
        worker_id=worker_id,
        on_tick=on_tick,
        parent_alive=parent_alive,
        orphans=orphans,
        on_claim=on_claim,
        pooled=pooled,
    )
