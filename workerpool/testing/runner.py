"""Run jobs in this process, through the worker's outcome rules: :func:`drain` and its parts,
for a pool (the runner itself is :mod:`workerpool.runtime.inline`).

A handler runs as it would in a worker: its exception is classified (retry after backoff, dead
when exhausted, dead at once on ``Permanent``, ``RetryLater``'s own delay) and the outcome is
written fenced on the job's lease, by the same code the worker uses.
"""

from __future__ import annotations

from typing import Any

from ..client import WorkerPool, explaining
from ..model.attempt import Outcome
from ..model.job import Job
from ..model.specs import TaskSpec
from ..runtime import inline
from ..runtime.inline import RETRY_MODES, Fired, Ran, call_handler

__all__ = ["RETRY_MODES", "Ran", "call_handler", "claim", "drain", "make_job", "run_claimed"]


def make_job(pool: WorkerPool, row: Any, worker: str) -> tuple[TaskSpec, Job]:
    """The task and the ``Job`` its handler gets for a claimed row (checkpoints fenced)."""
    return inline.make_job(pool.registry, pool.engine, row, worker)


def run_claimed(pool: WorkerPool, row: Any, worker: str) -> tuple[Outcome, str | None]:
    """Run one claimed row and record its outcome; returns (outcome, new state or None)."""
    return inline.run_claimed(pool.registry, pool.engine, row, worker, _fired(pool))


def claim(pool: WorkerPool, queue: str, worker: str, limit: int = 1) -> list[Any]:
    """Claim up to ``limit`` due jobs of ``queue`` as ``worker`` (alone: suspects included)."""
    return inline.claim(pool.registry, pool.engine, queue, worker, limit)


def drain(
    pool: WorkerPool, queue: str | None = None, *, retries: str = "wait", max_jobs: int = 10_000
) -> list[Ran]:
    """Run every due job of ``queue`` (default: every declared queue) inline, one at a time,
    until none is due; returns what ran, in run order. ``retries``: "wait" leaves a failed job
    to its backoff; "now" makes it due at once, so it runs until done or dead."""
    with explaining(pool):  # a database never migrated: one line naming `workerpool migrate`
        return inline.drain(
            pool.registry,
            pool.engine,
            queue,
            retries=retries,
            max_jobs=max_jobs,
            fired=_fired(pool),
        )


def _fired(pool: WorkerPool) -> Fired:
    """In inline mode, the callbacks a batch's last outcome enqueued run like enqueued jobs."""
    return lambda ids: pool._enqueued(None, ids)
