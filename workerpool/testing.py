"""Run jobs inline, in this process: for tests of your handlers and of workerpool itself.

``drain(pool, "email")`` claims due jobs of a queue and runs them one by one through the same
outcome rules the worker processes use, until nothing is due.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import queries
from .errors import LeaseLost
from .jobs import Job, new_worker_id
from .outcome import Outcome, classify, upcast
from .payload import dumps
from .pool import TaskSpec, WorkerPool
from .worker.outcomes import record


def call_handler(spec: TaskSpec, job: Job) -> BaseException | None:
    """Run the handler; return the exception it raised, or None if it returned."""
    try:
        result = spec.fn(job)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    except Exception as exc:
        return exc
    return None


def make_job(pool: WorkerPool, row: Any, worker: str) -> tuple[TaskSpec, Job]:
    spec = pool.task_spec(row.task)
    payload = upcast(spec, row.payload, row.payload_version)

    def saver(job: Job, data: Any) -> None:
        text = dumps(data, limit=pool.payload_limit, what="checkpoint", object_only=False)
        lease = queries.Lease(job.id, job.attempt, worker)
        with pool.engine.begin() as conn:
            if not queries.save_checkpoint(conn, lease, text):
                raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")

    job = Job.from_row(row, worker=worker, saver=saver)
    return spec, Job(**{**job.__dict__, "payload": payload})


def run_claimed(pool: WorkerPool, row: Any, worker: str) -> tuple[Outcome, str | None]:
    """Run one claimed row and record its outcome; returns (outcome, new state or None)."""
    spec, job = make_job(pool, row, worker)
    outcome = classify(call_handler(spec, job), spec, job.attempt, worker)
    with pool.engine.begin() as conn:
        state = record(conn, queries.Lease(row.id, row.attempts, worker), outcome)
    return outcome, state


def claim(pool: WorkerPool, queue: str, worker: str, limit: int = 1) -> list[Any]:
    spec = pool.queue_spec(queue)
    with pool.engine.begin() as conn:
        queries.recover_stale(conn, queue, spec.stale_after)  # as a worker's renewal beat does
        return queries.claim(
            conn,
            queue=queue,
            worker=worker,
            limit=limit,
            task_versions=pool.task_versions(queue),
            stale_after=spec.stale_after,
            alone=True,  # it runs one job at a time, holding nothing else
        )


def drain(pool: WorkerPool, queue: str, *, max_jobs: int = 10_000) -> list[tuple[int, str | None]]:
    """Run every due job of ``queue`` inline; returns ``(job id, new state)`` in run order."""
    worker = new_worker_id()
    ran: list[tuple[int, str | None]] = []
    while len(ran) < max_jobs:
        rows = claim(pool, queue, worker, limit=1)
        if not rows:
            return ran
        _, state = run_claimed(pool, rows[0], worker)
        ran.append((rows[0].id, state))
    return ran
