"""The application a chaos run's supervisors run: ``workerpool run workerpool.chaos.app:pool``.

One handler per kind of job, each an idempotent consumer that records itself in the ledger
(:mod:`.ledger`): ``plain`` (short), ``slow`` (seconds, longer than the lease, so it lives on
lease renewal), ``flaky`` (fails its first attempts), ``poison`` (kills its own process every
time), ``member`` (a batch's member) and ``batch_done`` (a batch's callback, which writes down
how many members it saw still live), ``node`` and ``node_run`` (steps of chains, graphs and
sequences; ``node_run`` runs even when a parent failed), ``stepped`` (three durable steps, each
writing its run to the ledger, with a pause between them that faults land in), ``once`` (its
effect, a keyless row, written in the transaction that ends the job: ``complete_in``),
``awaiting`` (a parent that spawns a ``plain`` child and awaits it, ``job.wait_for_job``), and
the cron job
``tick`` (every two seconds, slower than its period now and then, so ticks are skipped rather
than overlapped). ``plain``, ``member`` and ``awaiting`` return a result the checker can predict
from the job
(:func:`expected_result`). Timings are short so that recovery is seconds.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
import zlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from workerpool import Backoff, Job, Permanent, WorkerPool

from .ledger import CALLBACK, EFFECT, FINISH, LEDGER_URL_ENV, ONCE, PROBE, START, STEP, Ledger

STALE_AFTER = 3.0  # the library's minimum: leases of stopped processes go stale fast
SETTINGS = {
    "stale_after": STALE_AFTER,
    "drain_timeout": 2.0,
    "hang_timeout": 3.0,
    "poll_interval": 0.2,
}
FAST_RETRY = Backoff(base=0.2, factor=2.0, cap=2.0)
PROBE_EVERY = 0.5  # seconds between lease samples while a slow job runs
CRON = "* * * * * */2"  # croniter's sixth field: seconds


class Flaky(Exception):
    """The planned failure of a flaky job's early attempt."""


pool = WorkerPool()
pool.queue("work", concurrency=8, **SETTINGS)
pool.queue("slow", concurrency=4, **SETTINGS)
pool.queue("cron", concurrency=1, **SETTINGS)
_ledger: Ledger | None = None


def ledger() -> Ledger:
    global _ledger
    if _ledger is None:
        direct = os.environ.get(LEDGER_URL_ENV)
        _ledger = Ledger(make_url(direct) if direct else pool.url)
    return _ledger


class Execution:
    """One run of one handler, as the ledger sees it."""

    def __init__(self, job: Job, kind: str) -> None:
        self.job, self.kind, self.id = job, kind, uuid.uuid4().hex
        self.ledger = ledger()

    def __enter__(self) -> Execution:
        self.ledger.execute(
            START,
            {
                "exec": self.id,
                "job": self.job.id,
                "kind": self.kind,
                "attempt": self.job.attempt,
                "worker": self.job.worker,
                "pid": os.getpid(),
                "tick": str(self.job.payload.get("tick")) if self.kind == "tick" else None,
            },
        )
        self.probe()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.finish("ok" if exc is None else f"raised:{type(exc).__name__}")

    def probe(self) -> bool:
        row = self.ledger.execute(
            PROBE,
            {
                "exec": self.id,
                "job": self.job.id,
                "worker": self.job.worker,
                "attempt": self.job.attempt,
                "stale": STALE_AFTER,
            },
        )
        return bool(row and row[0])

    def finish(self, outcome: str) -> None:
        self.probe()
        self.ledger.execute(FINISH, {"exec": self.id, "outcome": outcome})

    def effect(self) -> None:
        key = self.job.key or f"job:{self.job.id}"
        self.ledger.execute(EFFECT, {"key": key, "job": self.job.id, "exec": self.id})

    def step(self, name: str) -> str:
        """The work of durable step ``name``: its run written to the ledger."""
        self.ledger.execute(STEP, {"job": self.job.id, "step": name, "exec": self.id})
        return f"{name} ok"

    def work(self, seconds: float) -> None:
        """Sleep ``seconds``, sampling the lease every :data:`PROBE_EVERY`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, PROBE_EVERY))
            self.probe()


def expected_result(task: str, key: str | None, payload: dict[str, Any]) -> Any:
    """What the handler of ``task`` returns for this job (None: it returns nothing)."""
    if task == "plain":
        return {"key": key}
    if task == "member":
        return {"key": key, "n": payload.get("n")}
    if task == "stepped":
        return [f"{name} ok" for name in STEPS]
    if task == "once":
        return {"once": key}
    if task == "awaiting":  # its child's result: a plain job keyed after it
        return {"got": expected_result("plain", f"{key}:child", {})}
    return None


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def plain(job: Job) -> Any:
    with Execution(job, "plain") as run:
        time.sleep(float(job.payload.get("seconds", 0.02)))
        run.effect()
    return expected_result("plain", job.key, job.payload)


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def once(job: Job) -> None:
    with Execution(job, "once") as run:
        run.effect()  # the ledger's own proof that this run happened (keyed: idempotent)
        time.sleep(float(job.payload.get("seconds", 0.02)))  # faults land here
        with pool.engine.begin() as conn:
            conn.execute(text(ONCE), {"job": job.id, "attempt": job.attempt, "exec": run.id})
            job.complete_in(conn, result=expected_result("once", job.key, job.payload))


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def member(job: Job) -> Any:
    with Execution(job, "member") as run:
        time.sleep(float(job.payload.get("seconds", 0.01)))
        run.effect()
    return expected_result("member", job.key, job.payload)


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def batch_done(job: Job) -> None:
    with Execution(job, "callback") as run:
        run.ledger.execute(CALLBACK, {"exec": run.id, "job": job.id, "batch": job.batch_id})
        run.effect()


@pool.task(queue="slow", max_attempts=5, backoff=FAST_RETRY, timeout=60)
def slow(job: Job) -> None:
    with Execution(job, "slow") as run:
        run.work(float(job.payload.get("seconds", 5.0)))
        run.effect()


#: The steps of a ``stepped`` job, in order.
STEPS = ("reserve", "charge", "notify")


@pool.task(queue="slow", max_attempts=5, backoff=FAST_RETRY, timeout=60)
def stepped(job: Job) -> Any:
    with Execution(job, "stepped") as run:
        done = []
        for name in STEPS:
            done.append(job.step(name, lambda name=name: run.step(name)))
            run.work(float(job.payload.get("pause", 0.5)))  # faults land between the steps
        run.effect()
    return done


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def awaiting(job: Job) -> Any:
    """A parent that enqueues a ``plain`` child (in a step, under a key derived from its own, so
    a run again finds the same child) and awaits it without holding its slot."""
    with Execution(job, "awaiting") as run:
        spawn = lambda: pool.enqueue("plain", {"seconds": 0.02}, key=f"{job.key}:child")  # noqa: E731
        got = job.wait_for_job(job.step("spawn", spawn))
        run.effect()
    return {"got": got}


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def flaky(job: Job) -> None:
    with Execution(job, "flaky") as run:
        if job.attempt <= int(job.payload.get("fail", 1)):
            raise Flaky(f"planned failure of attempt {job.attempt}")
        run.effect()


def _node(job: Job, kind: str) -> dict[str, Any]:
    """A step of a chain, a graph or a sequence: fails for good when its payload says so (its
    dependents are then cancelled, or run anyway for ``node_run``), returns its parents."""
    with Execution(job, kind) as run:
        time.sleep(float(job.payload.get("seconds", 0.01)))
        if job.payload.get("fail"):
            raise Permanent("a planned failure of a workflow step")
        run.effect()
    return {"parents": sorted(job.parent_results)}


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY)
def node(job: Job) -> dict[str, Any]:
    return _node(job, "node")


@pool.task(queue="work", max_attempts=5, backoff=FAST_RETRY, on_dependency_failure="run")
def node_run(job: Job) -> dict[str, Any]:
    return _node(job, "node_run")


@pool.task(queue="work", max_attempts=3, backoff=FAST_RETRY)
def poison(job: Job) -> None:
    run = Execution(job, "poison").__enter__()
    run.finish("killed")
    os.kill(os.getpid(), signal.SIGKILL)


@pool.cron(
    CRON,
    queue="cron",
    name="tick",
    overlap="skip",
    missed="run_once",
    max_attempts=5,
    backoff=FAST_RETRY,
)
def tick(job: Job) -> None:
    with Execution(job, "tick") as run:
        # one tick in four outlasts the period: the next tick must be skipped, not overlapped
        slow_tick = zlib.crc32(str(job.payload.get("tick")).encode()) % 4 == 0
        run.work(2.5 if slow_tick else 0.3)
        run.effect()
