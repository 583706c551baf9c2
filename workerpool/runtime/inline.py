"""Run jobs in this process, one at a time, through the worker's outcome rules: :func:`drain`,
and inline mode (:class:`InlineRunner`: ``pool.testing_mode("inline")``), which drains each
job's queue right after its enqueuing transaction commits.

A handler runs as it would in a worker: its exception is classified (retry after backoff, dead
when exhausted, dead at once on ``Permanent``, ``RetryLater``'s own delay) and the outcome is
written fenced on the job's lease, by the same code the worker uses. What runs here is what
``workerpool.testing`` offers a test suite; it takes the registry and an engine, never a pool.

Inline mode runs a job only once it is committed: its handler may read what the enqueuing
transaction wrote, and a rollback must leave nothing to run. SQLAlchemy's ``commit`` event on
the caller's Connection fires just before the DBAPI commit, so the listener commits the DBAPI
connection itself (the same commit, taken a moment earlier; SQLAlchemy's own then has nothing
left to do), and then drains the queues the new jobs are in. A rollback disarms it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, event

from .. import sql
from ..model.attempt import Outcome, classify, upcast
from ..model.errors import InvalidJob, LeaseLost
from ..model.job import Job, Lease, new_worker_id
from ..model.notices import report_cancelled
from ..model.payload import dumps
from ..model.progress import progress_json
from ..model.registry import Registry
from ..model.specs import TaskSpec
from ..model.steps import Suspended
from ..sql import dependencies
from ..sql.job_logs import insert_logs
from ..sql.progress import save_progress
from .once import settle_outcome
from .steps import StepStore
from .worker.joblogs import CURRENT, AttemptLog, install
from .worker.outcomes import record_settling

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
        return (
            f"Ran(job_id={self[0]}, task={self.task!r}, state={self[1]!r}, "
            f"outcome={self.outcome.kind!r})"
        )


def call_handler(spec: TaskSpec, job: Job) -> BaseException | None:
    """Run the handler; return the exception it raised, or None if it returned."""
    return call_handler_for_result(spec, job)[0]


def call_handler_for_result(spec: TaskSpec, job: Job) -> tuple[BaseException | None, Any]:
    """Run the handler (an ``async def`` one in an event loop of its own): ``(None, what it
    returned)`` or ``(what it raised, None)``."""
    try:
        result = spec.call(job)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
    # Suspended: a sleep or a wait, an outcome too. SystemExit: a handler's exit() fails its
    # job, as in a worker (KeyboardInterrupt still stops the caller that runs jobs inline).
    except (Exception, SystemExit, Suspended) as exc:
        return exc, None
    return None, result


def make_job(
    registry: Registry,
    engine: Engine,
    row: Any,
    worker: str,
    *,
    steps: StepStore | None = None,
    reach: Callable[[str], None] = lambda point: None,
) -> tuple[TaskSpec, Job]:
    """The task and the Job its handler gets. ``steps``: the store of its steps (default: one
    on ``engine``); ``reach`` is told each durable point a checkpoint passes (the crash
    harness, :mod:`workerpool.testing.crash_points`, ends the attempt at one)."""
    spec = registry.task_spec(row.task)
    payload = upcast(spec, row.payload, row.payload_version)

    def saver(job: Job, data: Any) -> None:
        text = dumps(data, limit=registry.payload_limit, what="checkpoint", object_only=False)
        lease = Lease(job.id, job.attempt, worker)
        reach("checkpoint:before")
        with engine.begin() as conn:
            if not sql.save_checkpoint(conn, lease, text):
                raise LeaseLost(f"job {job.id}: lease lost, checkpoint not saved")
        reach("checkpoint:after")

    def parents(job_id: int) -> dict[int, Any]:
        with engine.connect() as conn:
            return dependencies.parent_results(conn, job_id)

    def progress(job: Job, value: Any) -> None:  # unthrottled: one job at a time, in a test
        text = progress_json(value)
        with engine.begin() as conn:
            if not save_progress(conn, Lease(job.id, job.attempt, worker), text):
                raise LeaseLost(f"job {job.id}: lease lost, progress not saved")

    if steps is None:
        steps = StepStore(worker, registry.payload_limit, engine.begin)
    job = Job.from_row(
        row,
        worker=worker,
        saver=saver,
        parents=parents,
        steps=steps,
        progress=progress,
        completion=steps.once,
    )
    return spec, Job(**{**job.__dict__, "payload": payload})


#: Told the ids of the callback jobs an outcome enqueued (it finished their batch).
Fired = Callable[[list[int]], None]


def run_claimed(
    registry: Registry, engine: Engine, row: Any, worker: str, fired: Fired | None = None
) -> tuple[Outcome, str | None]:
    """Run one claimed row and record its outcome, with what follows a final one (waiters
    woken, its batch finished); returns (outcome, new state or None). ``fired`` is given the
    callback jobs the outcome enqueued (inline mode runs them like enqueued jobs)."""
    spec, job = make_job(registry, engine, row, worker)
    logs = _attempt_log(registry, spec)
    captured = CURRENT.set(logs)
    try:
        exc, result = call_handler_for_result(spec, job)
    finally:
        CURRENT.reset(captured)
    outcome = classify(exc, spec, job.attempt, worker, result=result, limit=registry.payload_limit)
    lease = Lease(row.id, row.attempts, worker)
    outcome = settle_outcome(outcome, job, engine.begin, lease)
    with engine.begin() as conn:
        states, followed = record_settling(conn, worker, [(lease, outcome)])
        if logs and states[row.id] is not None:
            insert_logs(conn, [(row.id, row.attempts, logs.as_json(), logs.dropped)])
    report_cancelled(registry.on_cancel, followed.cancelled)
    callbacks = [job_id for batch in followed.fired for job_id in batch.callback_ids]
    if callbacks and fired is not None:
        fired(callbacks)
    return outcome, states[row.id]


def _attempt_log(registry: Registry, spec: TaskSpec) -> AttemptLog | None:
    """A log capture for this attempt when its queue keeps logs (``capture_logs``)."""
    queue = registry.queues.get(spec.queue)
    if queue is None or not queue.capture_logs:
        return None
    install()
    return AttemptLog()


def claim(registry: Registry, engine: Engine, queue: str, worker: str, limit: int = 1) -> list[Any]:
    spec = registry.queue_spec(queue)
    with engine.begin() as conn:
        sql.recover_stale(conn, queue, spec.stale_after)  # as a worker's renewal beat does
        return sql.claim(
            conn,
            queue=queue,
            worker=worker,
            limit=limit,
            task_versions=registry.task_versions(queue),
            alone=True,  # it runs one job at a time, holding nothing else
        )


def drain(
    registry: Registry,
    engine: Engine,
    queue: str | None = None,
    *,
    retries: str = "wait",
    max_jobs: int = 10_000,
    fired: Fired | None = None,
) -> list[Ran]:
    """Run every due job of ``queue`` (default: every declared queue) inline, one at a time,
    until none is due; returns what ran, in run order. ``retries``: see :data:`RETRY_MODES`;
    ``fired``: see :func:`run_claimed`."""
    if retries not in RETRY_MODES:
        raise InvalidJob(f"retries must be one of {RETRY_MODES}, got {retries!r}")
    queues = [registry.queue_spec(queue).name] if queue is not None else sorted(registry.queues)
    worker = new_worker_id()
    ran: list[Ran] = []
    while len(ran) < max_jobs:
        before = len(ran)
        for name in queues:
            ran += _drain_queue(registry, engine, name, worker, retries, max_jobs - len(ran), fired)
        if len(ran) == before:
            return ran
    return ran


def _drain_queue(
    registry: Registry,
    engine: Engine,
    queue: str,
    worker: str,
    retries: str,
    budget: int,
    fired: Fired | None,
) -> list[Ran]:
    ran: list[Ran] = []
    while len(ran) < budget:
        rows = claim(registry, engine, queue, worker, limit=1)
        if not rows:
            return ran
        outcome, state = run_claimed(registry, engine, rows[0], worker, fired)
        ran.append(Ran(rows[0].id, rows[0].task, state, outcome))
        if retries == "now" and state == "failed":
            with engine.begin() as conn:
                sql.make_due(conn, [rows[0].id])
    return ran


#: What ``pool.testing_mode`` accepts.
MODES = ("inline", None)


class InlineRunner:
    """Called by the pool after each enqueue, with the caller's connection (or None) and the
    ids it wrote. ``engine``: gives the pool's engine when a drain needs it."""

    def __init__(self, registry: Registry, engine: Callable[[], Engine]) -> None:
        self.registry, self.engine = registry, engine
        self.running = threading.local()

    def __call__(self, conn: Any, ids: list[int]) -> None:
        if not ids:
            return
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
                engine = self.engine()
                with engine.connect() as conn:
                    queues = sql.job_queues(conn, pending)
                pending.clear()
                ran: list[Ran] = []
                for queue in queues:  # a batch's callbacks join ``pending`` (self.run)
                    ran += drain(self.registry, engine, queue, fired=self.run)
                with engine.connect() as conn:  # and the dependents they released, any queue
                    pending += sql.due_dependents(conn, [job_id for job_id, _ in ran])
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
