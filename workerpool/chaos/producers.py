"""Producers: threads enqueueing single, bulk and transactional jobs, some rolled back.

Every job has an idempotency key, so an enqueue whose outcome is unknown (the connection died
around the COMMIT) is retried with the same key and payload: it either finds the row it wrote
or writes it now, never a twin. The log (:class:`Enqueued`) is what the checker holds the
database to: an ``ok`` key must end terminal, a ``rolled_back`` key must never exist nor run.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import text

from workerpool import WorkerPool, WorkerpoolError

log = logging.getLogger("workerpool.chaos")

RETRY_FOR = 60.0  # seconds an enqueue is retried through outages before it is given up
BUSINESS = text("INSERT INTO chaos_business (key) VALUES (:key) ON CONFLICT DO NOTHING")
MODES = ("single", "bulk", "transaction", "rollback", "batch", "result", "workflow")
MODE_WEIGHTS = (5, 2, 2, 1, 1, 1, 2)
#: Shapes of the ``workflow`` mode: a chain, a diamond graph, or a job into a shared sequence.
SHAPES = ("chain", "graph", "sequence")
#: Sequences the producers share (the same names from every thread, so enqueuers race).
SEQUENCES = 4
#: The share of workflow steps that fail for good (their dependents are cancelled).
STEP_FAILS = 0.12


class RolledBack(Exception):
    """Raised inside a transaction to roll it back on purpose."""


@dataclass
class Enqueued:
    key: str
    task: str
    mode: str
    status: str  # ok · rolled_back · gave_up (outcome unknown: checked as "recovered" if found)
    job_id: int | None = None
    batch: str | None = None  # the key of the batch it was enqueued into


@dataclass
class Read:
    """A ``pool.result`` a producer waited for: what it returned, or the error's name."""

    key: str
    task: str
    job_id: int
    value: Any
    error: str | None = None


class Producers:
    """``threads`` producers at about ``rate`` operations a second in all, until stopped."""

    def __init__(
        self, pool: WorkerPool, seed: int, rate: float, threads: int, poison_every: float
    ) -> None:
        self.pool, self.seed, self.rate, self.threads = pool, seed, rate, threads
        self.poison_every = poison_every
        self.log: list[Enqueued] = []
        self.workflows: Counter = Counter()  # "<shape>: <status>" → how many
        self.reads: list[Read] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._last_poison = time.monotonic()
        self._count = 0

    def start(self) -> None:
        for index in range(self.threads):
            thread = threading.Thread(
                target=self._run, args=(index,), daemon=True, name=f"chaos-producer-{index}"
            )
            thread.start()
            self._workers.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(RETRY_FOR + 5)

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(entry) for entry in self.log]

    def result_reads(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(read) for read in self.reads]

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        gap = self.threads / self.rate
        while not self._stop.wait(rng.expovariate(1.0 / gap)):
            mode = rng.choices(MODES, MODE_WEIGHTS)[0]
            if mode == "workflow":
                self._workflow(rng)
                continue
            size = {"bulk": rng.randint(3, 10), "batch": rng.randint(0, 20)}.get(mode, 1)
            batch = [
                self._job(rng, bulk=mode == "bulk", member=mode == "batch") for _ in range(size)
            ]
            try:
                self._enqueue(mode, batch)
            except Exception as exc:  # gave up after RETRY_FOR: logged, checked as unknown
                log.warning("enqueue gave up: %s", exc)
                self._record(batch, mode, "gave_up")

    def _job(
        self, rng: random.Random, bulk: bool, member: bool = False
    ) -> tuple[str, dict[str, Any], str]:
        with self._lock:
            self._count += 1
            key = f"chaos:{self.seed}:{self._count}"
            if member:
                return "member", {"n": self._count, "seconds": round(rng.uniform(0, 0.03), 3)}, key
            poison = time.monotonic() - self._last_poison > self.poison_every
            if poison:
                self._last_poison = time.monotonic()
        if poison:
            return "poison", {}, key
        # slow jobs hold a slot for seconds: few of them, never in bulk, or the backlog grows
        task = rng.choices(
            ("plain", "once", "flaky", "slow", "stepped", "awaiting"),
            (70, 15, 12, 0 if bulk else 3, 0 if bulk else 3, 0 if bulk else 3),
        )[0]
        payload: dict[str, Any] = {
            "plain": lambda: {"seconds": round(rng.uniform(0.005, 0.05), 3)},
            "once": lambda: {"seconds": round(rng.uniform(0.005, 0.05), 3)},
            "flaky": lambda: {"fail": rng.randint(1, 2)},
            "slow": lambda: {"seconds": round(rng.uniform(3.5, 6.0), 1)},
            "stepped": lambda: {"pause": round(rng.uniform(0.3, 1.5), 1)},
            "awaiting": dict,
        }[task]()
        return task, payload, key

    def _enqueue(self, mode: str, batch: list[tuple[str, dict[str, Any], str]]) -> None:
        if mode == "rollback":
            self._rolled_back(batch)
            return
        batch_key = None
        if mode == "batch":
            with self._lock:
                self._count += 1
                batch_key = f"chaos-batch:{self.seed}:{self._count}"
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:  # a batch is retried under its key: the coordinator's second run
                ids = self._write(mode, batch, batch_key)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._record(batch, mode, "ok", ids, batch_key)
        if mode == "result":
            self._read(batch[0][2], batch[0][0], ids[0])

    def _read(self, key: str, task: str, job_id: int) -> None:
        """Wait for the job's result as an application would (through outages: retried)."""
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                read = Read(key, task, job_id, self.pool.result(job_id, timeout=RETRY_FOR))
                break
            except WorkerpoolError as exc:  # JobFailed, ResultTimeout...: what it said
                read = Read(key, task, job_id, None, type(exc).__name__)
                break
            except Exception:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.2)
        with self._lock:
            self.reads.append(read)

    def _write(
        self, mode: str, batch: list[tuple[str, dict[str, Any], str]], batch_key: str | None = None
    ) -> list[int]:
        if mode == "batch":
            with self.pool.batch(
                on_complete="batch_done", key=batch_key, payload={"producer": batch_key}
            ) as opened:
                return opened.enqueue_many([(t, p, {"key": k}) for t, p, k in batch])
        if mode in ("single", "result"):
            task, payload, key = batch[0]
            return [self.pool.enqueue(task, payload, key=key)]
        if mode == "bulk":
            return self.pool.enqueue_many([(t, p, {"key": k}) for t, p, k in batch])
        with self.pool.engine.begin() as conn:  # the business write and the job, or neither
            task, payload, key = batch[0]
            conn.execute(BUSINESS, {"key": key})
            return [self.pool.enqueue(task, payload, key=key, conn=conn)]

    def _workflow(self, rng: random.Random) -> None:
        """A chain, a graph or sequenced jobs, with their business row, in one transaction.
        Workflow steps have no key (a key cannot go with ``after=``): an enqueue whose outcome
        is unknown is retried only if its business row is not there (it did not commit)."""
        with self._lock:
            self._count += 1
            key = f"chaos-wf:{self.seed}:{self._count}"
        shape = rng.choice(SHAPES)

        def step(i: int, run: bool = False) -> tuple[str, dict[str, Any]]:
            return (
                "node_run" if run else "node",
                {
                    "wf": key,
                    "i": i,
                    "fail": rng.random() < STEP_FAILS,
                    "seconds": round(rng.uniform(0.005, 0.03), 3),
                },
            )

        steps = [step(i, run=i > 0 and rng.random() < 0.2) for i in range(rng.randint(2, 5))]
        sequence = f"chaos-seq:{rng.randrange(SEQUENCES)}"
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                with self.pool.engine.begin() as conn:
                    conn.execute(BUSINESS, {"key": key})
                    self._write_workflow(conn, shape, steps, sequence)
                status = "ok"
                break
            except Exception:
                if self._committed(key):
                    status = "ok (outcome unknown, found)"
                    break
                if time.monotonic() > deadline:
                    status = "gave_up"
                    break
                time.sleep(0.2)
        with self._lock:
            self.workflows[f"{shape}: {status}"] += 1

    def _write_workflow(
        self, conn: Any, shape: str, steps: list[tuple[str, dict[str, Any]]], sequence: str
    ) -> None:
        if shape == "chain":
            self.pool.chain(steps, conn=conn)
        elif shape == "graph":  # a diamond: the first, the middle ones after it, the last
            graph = self.pool.workflow()
            first = graph.step("first", *steps[0])
            middle = [
                graph.step(f"m{i}", task, payload, after=[first])
                for i, (task, payload) in enumerate(steps[1:-1])
            ]
            graph.step("last", *steps[-1], after=middle or [first])
            graph.run(conn)
        else:
            for task, payload in steps[:3]:
                self.pool.enqueue(task, payload, sequence=sequence, conn=conn)

    def _committed(self, key: str) -> bool:
        try:
            with self.pool.engine.connect() as conn:
                return (
                    conn.execute(
                        text("SELECT 1 FROM chaos_business WHERE key = :key"), {"key": key}
                    ).first()
                    is not None
                )
        except Exception:
            return False

    def _rolled_back(self, batch: list[tuple[str, dict[str, Any], str]]) -> None:
        task, payload, key = batch[0]
        job_id = None
        try:
            with self.pool.engine.begin() as conn:
                conn.execute(BUSINESS, {"key": key})
                job_id = self.pool.enqueue(task, payload, key=key, conn=conn)
                raise RolledBack
        except RolledBack:
            self._record(batch, "rollback", "rolled_back", [job_id])
        except Exception:  # failed before the rollback: nothing was committed either
            self._record(batch, "rollback", "rolled_back", [job_id])

    def _record(
        self,
        batch: list[tuple[str, dict[str, Any], str]],
        mode: str,
        status: str,
        ids: list[int | None] | None = None,
        batch_key: str | None = None,
    ) -> None:
        ids = ids or [None] * len(batch)
        with self._lock:
            self.log += [
                Enqueued(key, task, mode, status, job_id, batch_key)
                for (task, _, key), job_id in zip(batch, ids, strict=True)
            ]
