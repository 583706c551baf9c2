"""Run jobs in this process, through the worker's outcome rules: :func:`drain`.

A handler runs as it would in a worker: its exception is classified (retry after backoff, dead
when exhausted, dead at once on ``Permanent``, ``RetryLater``'s own delay) and the outcome is
written fenced on the job's lease, by the same code the worker uses.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .. import queries
from ..errors import InvalidJob, LeaseLost
from ..jobs import Job, new_worker_id
from ..outcome import Outcome, classify, upcast
from ..payload import dumps
from ..pool import TaskSpec, WorkerPool
from ..worker.outcomes import record_settling

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

    @property
    def result(self) -> Any:
        """What the handler returned (decoded JSON), when the attempt ended ``done``."""
        text = self.outcome.result
        return None if text is None else json.loads(text)

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
    return call_handler_for_result(spec, job)[0]


def call_handler_for_result(spec: TaskSpec, job: Job) -> tuple[BaseException | None, Any]:
    """Run the handler (an ``async def`` one in an event loop of its own): ``(None, what it
    returned)`` or ``(what it raised, None)``."""
    try:
        result = spec.fn(job)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
    except Exception as exc:
        return exc, None
    return None, result


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
    exc, result = call_handler_for_result(spec, job)
    outcome = classify(exc, spec, job.attempt, worker, result=result, limit=pool.payload_limit)
    lease = queries.Lease(row.id, row.attempts, worker)
    with pool.engine.begin() as conn:
        states, fired = record_settling(conn, worker, [(lease, outcome)])
    callbacks = [job_id for batch in fired for job_id in batch.callback_ids]
    if callbacks and pool._inline is not None:  # inline mode runs them like enqueued jobs
        pool._inline(None, callbacks)
    return outcome, states[row.id]


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
                queries.make_due(conn, [rows[0].id])
    return ran
