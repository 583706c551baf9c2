"""Every crash a handler can meet, one at a time: :func:`crash_points`.

A handler that writes an effect meets a crash at one of a few durable points: before or after a
step's record, before or after ``complete_in``'s write, just after the transaction that holds
it commits, before or after a checkpoint, and before the outcome is written (a sleep's and a
wait's included). :func:`crash_points` runs a fresh job of the task once per point, in this
process, and ends that attempt there as a SIGKILL would: a :class:`BaseException` the handler
cannot swallow leaves it (an open transaction of the handler rolls back, as PostgreSQL rolls
back a dead client's), and the job's lease is released by the same code that releases a dead
child's (the attempt charged as a crash). Then the job runs to its end, and ``check(job_id)``
says whether the effect happened as it should. The points are found as the runs go: run N
crashes at the N-th point reached, and the first run that ends without reaching its point ends
the search (its check runs too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, event

from ..client import WorkerPool, explaining
from ..model.attempt import classify
from ..model.errors import CrashPointFailure, InvalidJob
from ..model.job import Job, Lease, new_worker_id
from ..model.states import FINAL_STATES, JobState
from ..runtime import inline
from ..runtime.once import Once, connection_of, settle_outcome
from ..runtime.release import release_orphans
from ..runtime.steps import StepStore
from ..runtime.worker.outcomes import record_settling
from ..sql import job_states, make_due

__all__ = ["CrashPointFailure", "crash_points"]

#: A handler that keeps reaching new points (a loop of steps) is cut off here.
MAX_POINTS = 200


class Crash(BaseException):
    """The planted death: a BaseException, so that a handler's ``except Exception`` cannot
    swallow it (a SIGKILL cannot be caught either)."""


class Planter:
    """Counts the durable points a run reaches and crashes at the ``target``-th."""

    def __init__(self, target: int) -> None:
        self.target, self.reached = target, 0
        self.crashed: str | None = None

    def reach(self, point: str) -> None:
        self.reached += 1
        if self.reached - 1 == self.target:
            self.crashed = point
            raise Crash(point)


class PlantedOnce(Once):
    """``complete_in`` with its three points: before the write, after it (the transaction
    still open) and just after the transaction that holds it commits."""

    def __init__(self, worker: str, engine: Engine, planter: Planter) -> None:
        super().__init__(worker, engine.begin)
        self.planter = planter

    def __call__(self, job: Job, conn: Any, result: str | None) -> Any:
        self.planter.reach("complete_in:before")
        followed = super().__call__(job, conn, result)
        self.planter.reach("complete_in:after")
        event.listen(connection_of(conn, job.id), "commit", self._committed, once=True)
        return followed

    def record_in(
        self, conn: Any, job: Any, name: str, kind: str, value: str, elapsed: float
    ) -> dict[str, Any] | None:
        self.planter.reach(f"{kind}:{name}:before-record")
        entry = super().record_in(conn, job, name, kind, value, elapsed)
        self.planter.reach(f"{kind}:{name}:after-record")
        return entry

    def _committed(self, conn: Connection) -> None:
        # the event fires just before the DBAPI commit: commit first, then die
        conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]
        self.planter.reach("complete_in:committed")


class PlantedSteps(StepStore):
    """A step store whose every write passes a point before and after it."""

    def __init__(self, worker: str, limit: int, engine: Engine, planter: Planter) -> None:
        super().__init__(worker, limit, engine.begin)
        self.planter = planter
        self.once = PlantedOnce(worker, engine, planter)

    def record(
        self, job: Any, name: str, kind: str, value: str, elapsed: float, timed_out: bool = False
    ) -> dict[str, Any] | None:
        self.planter.reach(f"{kind}:{name}:before-record")
        entry = super().record(job, name, kind, value, elapsed, timed_out)
        self.planter.reach(f"{kind}:{name}:after-record")
        return entry


def crash_points(
    pool: WorkerPool,
    task: str | Callable[..., Any],
    payload: dict[str, Any] | None = None,
    *,
    check: Callable[[int], Any],
    reset: Callable[[], Any] | None = None,
    **options: Any,
) -> list[str]:
    """Run a fresh job of ``task`` once per durable point, crashing it there, and let it
    finish; after each run call ``check(job_id)`` (an exception from it, an ``assert``'s
    included, fails the point). ``reset()``, if given, runs before each run (each run's effects
    stay otherwise). ``options``: ``pool.enqueue``'s (not ``key``: each run is a new job).

    Returns the points tried, in order. Raises :class:`CrashPointFailure` naming the point
    (``"none"``: the run that crashed nowhere) and the check's failure.
    """
    if not callable(check) or (reset is not None and not callable(reset)):
        raise InvalidJob("crash_points needs check= (and reset=, if given) to be callable")
    if "key" in options:
        raise InvalidJob("crash_points enqueues a new job per run: key= would reuse the first")
    spec = pool.registry.task_spec(task)
    tried: list[str] = []
    with explaining(pool):
        for target in range(MAX_POINTS):
            if reset is not None:
                reset()
            job_id = _enqueue(pool, spec.name, payload, options)
            point = _run(pool, job_id, target)
            _finish(pool, job_id)
            _check(check, job_id, point or "none")
            if point is None:
                return tried
            tried.append(point)
    raise CrashPointFailure(f"{spec.name} reached more than {MAX_POINTS} durable points")


def _enqueue(pool: WorkerPool, task: str, payload: Any, options: dict[str, Any]) -> int:
    """A new job, not run at once even in inline mode: the harness runs it."""
    seam = pool._enqueued
    pool._enqueued = lambda conn, ids: None
    try:
        return pool.enqueue(task, payload if payload is not None else {}, **options)
    finally:
        pool._enqueued = seam


def _run(pool: WorkerPool, job_id: int, target: int) -> str | None:
    """Run the job once, crashing at point ``target``; the point it crashed at, or None."""
    engine, registry = pool.engine, pool.registry
    worker = new_worker_id()
    row = _claim(pool, job_id, worker)
    if row is None:
        return None
    planter = Planter(target)
    steps = PlantedSteps(worker, registry.payload_limit, engine, planter)
    try:
        spec, job = inline.make_job(registry, engine, row, worker, steps=steps, reach=planter.reach)
        exc, result = inline.call_handler_for_result(spec, job)
        outcome = classify(
            exc, spec, job.attempt, worker, result=result, limit=registry.payload_limit
        )
        lease = Lease(row.id, row.attempts, worker)
        outcome = settle_outcome(outcome, job, engine.begin, lease)
        planter.reach("outcome")
        with engine.begin() as conn:
            record_settling(conn, worker, [(lease, outcome)])
    except Crash:
        with engine.begin() as conn:  # as the replacement of a dead child does
            release_orphans(conn, [worker])
    return planter.crashed


def _claim(pool: WorkerPool, job_id: int, worker: str) -> Any:
    """Claim ``job_id`` as ``worker``; other due jobs of its queue claimed first run as usual."""
    with pool.engine.begin() as conn:
        make_due(conn, [job_id])
    queue = pool.job(job_id).queue
    while rows := inline.claim(pool.registry, pool.engine, queue, worker, limit=1):
        if rows[0].id == job_id:
            return rows[0]
        inline.run_claimed(pool.registry, pool.engine, rows[0], worker)
    return None


def _finish(pool: WorkerPool, job_id: int) -> None:
    """Run the job (and what it started) until it ends, or waits for what nobody will send."""
    for _ in range(MAX_POINTS):
        inline.drain(pool.registry, pool.engine, retries="now")
        with pool.engine.begin() as conn:
            state = job_states(conn, [job_id]).get(job_id)
            if state in FINAL_STATES or state in (None, JobState.WAITING):
                return
            make_due(conn, [job_id])


def _check(check: Callable[[int], Any], job_id: int, point: str) -> None:
    try:
        check(job_id)
    except Exception as failure:
        raise CrashPointFailure(
            f"crash at {point}: check({job_id}) failed: {type(failure).__name__}: {failure}"
        ) from failure
