"""Claims of the limits' tests: one claim as a worker makes it, and several racing at once."""

from __future__ import annotations

import threading

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.limits import claim_limits


def claim(app: WorkerPool, worker: str, limit: int = 10):
    """One claim of queue ``q`` with its limits, in a transaction of its own."""
    limits = claim_limits(app.registry.queue_spec("q"), app.tasks)
    with app.engine.begin() as conn:
        return queries.claim(
            conn,
            queue="q",
            worker=worker,
            limit=limit,
            task_versions=app.registry.task_versions("q"),
            limits=limits,
        )


def claim_at_once(app: WorkerPool, claimers: int = 8, limit: int = 3) -> list[int]:
    """``claimers`` threads released together, each claiming once; the ids they all got."""
    claimed: list[int] = []
    start = threading.Barrier(claimers)

    def claimer(n: int) -> None:
        start.wait()
        claimed.extend(row.id for row in claim(app, f"w{n}", limit=limit))

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return claimed
