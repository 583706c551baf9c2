"""Run jobs in this process, through the worker's outcome rules: :func:`drain`.

A handler runs as it would in a worker: its exception is classified (retry after backoff, dead
when exhausted, dead at once on ``Permanent``, ``RetryLater``'s own delay) and the outcome is
written fenced on the job's lease, by the same code the worker uses.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import sql
from ..client import TaskSpec, WorkerPool
from ..model.attempt import Outcome, classify, upcast
from ..model.errors import InvalidJob, LeaseLost
from ..model.job import Job, new_worker_id
from ..model.payload import dumps
from ..runtime.worker.outcomes import record

#: ``drain(retries=...)``: "wait" leaves a failed job to its backoff (the worker's rule: it is
#: not due again in this drain); "now" makes it due at once, so it runs until done or dead.
RETRY_MODES = ("wait", "now")


class Ran(tuple[int, "str | None"]):
    """One attempt :func:`drain` ran: a ``(job_id, state)`` pair (so ``[(id, "done")]``
    comparisons and unpacking work), with the task's name and the outcome beside it.

    ``state`` is what the job was left in (``done``, ``failed`` waiting to retry, ``pending``
    snoozed, ``dead``; None if the lease was lost); ``outcome`` has its ``kind``, its
    ``error`` entry and its retry ``delay``.
    """

    task: str
    outcome: Outcome

    def __new__(cls, job_id: int, task: str, state: str | None, outcome: Outcome) -> Ran:
        ran = super().__new__(cls, (job_id, state))
        ran.task, ran.outcome = task, outcome
        return ran

    @property
    def job_id(self) -> int:
        return self[0]

    @property
    def state(self) -> str | None:
        return self[1]

    def __repr__(self) -> str:
        return f"Ran(job_id={self[0]}, task={self.task!r}, state={self[1]!r}, " \
               f"outcome={self.outcome.kind!r})"


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
        lease = sql.Lease(job.id, job.attempt, worker)
        with pool.engine.begin() as conn:
            if not sql.save_checkpoint(conn, lease, text):
                raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")

    job = Job.from_row(row, worker=worker, saver=saver)
    return spec, Job(**{**job.__dict__, "payload": payload})


def run_claimed(pool: WorkerPool, row: Any, worker: str) -> tuple[Outcome, str | None]:
    """Run one claimed row and record its outcome; returns (outcome, new state or None)."""
    spec, job = make_job(pool, row, worker)
    outcome = classify(call_handler(spec, job), spec, job.attempt, worker)
    with pool.engine.begin() as conn:
        state = record(conn, sql.Lease(row.id, row.attempts, worker), outcome)
    return outcome, state


def claim(pool: WorkerPool, queue: str, worker: str, limit: int = 1) -> list[Any]:
    spec = pool.queue_spec(queue)
    with pool.engine.begin() as conn:
        sql.recover_stale(conn, queue, spec.stale_after)  # as a worker's renewal beat does
        return sql.claim(
            conn,
            queue=queue,
            worker=worker,
            limit=limit,
            task_versions=pool.task_versions(queue),
            stale_after=spec.stale_after,
            alone=True,  # it runs one job at a time, holding nothing else
        )


def drain(pool: WorkerPool, queue: str | None = None, *, retries: str = "wait",
          max_jobs: int = 10_000) -> list[Ran]:
    """Run every due job of ``queue`` (default: every declared queue) inline, one at a time,
    until none is due; returns what ran, in run order. ``retries``: see :data:`RETRY_MODES`."""
    if retries not in RETRY_MODES:
        raise InvalidJob(f"retries must be one of {RETRY_MODES}, got {retries!r}")
    queues = [pool.queue_spec(queue).name] if queue is not None else sorted(pool.queues)
    worker = new_worker_id()
    ran: list[Ran] = []
    while len(ran) < max_jobs:
        before = len(ran)
        for name in queues:
            ran += _drain_queue(pool, name, worker, retries, max_jobs - len(ran))
        if len(ran) == before:
            return ran
    return ran


def _drain_queue(pool: WorkerPool, queue: str, worker: str, retries: str, budget: int
                 ) -> list[Ran]:
    ran: list[Ran] = []
    while len(ran) < budget:
        rows = claim(pool, queue, worker, limit=1)
        if not rows:
            return ran
        outcome, state = run_claimed(pool, rows[0], worker)
        ran.append(Ran(rows[0].id, rows[0].task, state, outcome))
        if retries == "now" and state == "failed":
            with pool.engine.begin() as conn:
                sql.make_due(conn, [rows[0].id])
    return ran
