"""The application of the batch tests (``test_batches.py``, ``test_batches_async.py``): member
tasks that succeed, fail, refuse or wait for a cancel, and the callbacks' queue."""

from __future__ import annotations

from workerpool import Permanent, WorkerPool

#: ``switchable`` fails while this says so.
SWITCH: dict[str, bool] = {"fail": True}


def declare(pool: WorkerPool) -> WorkerPool:
    """The batch tests' queues and tasks on ``pool``."""
    pool.queue("q", poll_interval=0.05, cancel_grace=5)
    pool.queue("reports", poll_interval=0.05)

    @pool.task(queue="q")
    def member(job):
        return {"n": job.payload.get("n")}

    @pool.task(queue="q", max_attempts=1)
    def broken(job):
        raise ValueError("broken")

    @pool.task(queue="q")
    def refuse(job):
        raise Permanent("no")

    @pool.task(queue="q")
    def switchable(job):
        if SWITCH["fail"]:
            raise Permanent("switched off")
        return "ok"

    @pool.task(queue="q")
    def wait_for_cancel(job):
        job.cancelled.wait(20)

    for name in ("report", "succeeded", "failed_report"):
        pool.task(queue="reports", name=name)(
            lambda job: {"batch": job.batch_id, "payload": job.payload}
        )
    return pool


def callbacks(sql, batch_id: int) -> list[tuple[str, str]]:
    """The callback jobs of a batch: (task, state), by id."""
    return sql(
        "SELECT task, state FROM workerpool_jobs WHERE id IN (SELECT"
        " unnest(callback_ids) FROM workerpool_batches WHERE id = %s) ORDER BY id",
        batch_id,
    )
