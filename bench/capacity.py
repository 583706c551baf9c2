"""Capacity: the server's CPU per job for the enqueue, the claim and the outcome write, each
beside its plain-psycopg floor, and what they allow per server core (docs/deployment.md,
"Sizing a primary").

**Method.** A PostgreSQL backend is one process; the CPU it has used is in
``/proc/<pid>/schedstat`` (its first field: nanoseconds on a CPU, the scheduler's own count;
``/proc/<pid>/stat``'s utime + stime, in clock ticks, where schedstat is missing). The bench
reads it for the backends serving its connections (their pids from ``pg_backend_pid()`` and
``pg_stat_activity``, client backends of the bench database only, its own reading connection
left out) before and after a phase of N jobs, and divides by N. The server must run on this
machine (the embedded one does, and so does a ``--url`` of ``127.0.0.1``): the section checks
that the pid is a ``postgres`` process here and stops otherwise. Autovacuum, the checkpointer
and the WAL writer are not client backends and are not counted.

**Phases** (each repeat, on an emptied jobs table):

- *enqueue*: ``pool.enqueue`` (one autocommit statement per job), the SQL door
  (``SELECT workerpool_enqueue(task, payload)``) and the raw floor (one autocommit INSERT with
  the workers' NOTIFY) in rotating blocks of 50 (``--single`` jobs each); ``enqueue_many`` of
  1,000 jobs a call against a raw ``COPY`` of 1,000 rows (N each).
- *the worker's pass*: on the N jobs ``enqueue_many`` wrote, the statements a worker's main
  loop sends, as ``scripts/pass_cost.py`` sends them: per pass, in one transaction, the outcome
  write of the rows the previous pass claimed (``record_settling``, all done) and a claim of
  100 more (``workerpool.sql.claim``); the backend's CPU read around each statement. The floor:
  the ceiling's two autocommit statements on the N rows the COPY wrote.
- *drain*: one ``workerpool run`` child draining N no-op jobs: the CPU of every backend it and
  its supervisor opened (claims, outcomes, lease renewals, heartbeats, LISTEN, maintenance).

**Per core**: ``1e6 / (enqueue + pass)`` jobs/s per core of the server, each phase's median;
with the drain's figure in place of the pass, and with ``enqueue_many`` in place of single
enqueues. What a primary needs is the enqueue and the outcome of every job, wherever its
producers and workers run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import psycopg

from workerpool import WorkerPool, sql
from workerpool.model.attempt import DONE
from workerpool.model.job import Lease
from workerpool.runtime.worker.outcomes import record_settling

from . import ceiling, doors, enqueue, floors, supervised
from .app import QUEUE, noop
from .database import BenchDatabase
from .report import Report

log = logging.getLogger("workerpool.bench")

PASS_ROWS = ceiling.BATCH  # rows per claim, the worker's and the floor's
WORKER = "bench-capacity"
PER_CORE = "jobs/s/core"


def name(what: str) -> str:
    return f"capacity_{what}"


#: (figure, reference, second reference, note), in the order printed; all us of server CPU/job.
SERVER_US = (
    ("enqueue_raw_us", None, None, "autocommit INSERT + NOTIFY per job, plain psycopg"),
    ("enqueue_us", "enqueue_raw_us", None, "pool.enqueue without conn="),
    ("enqueue_sql_us", "enqueue_us", "enqueue_raw_us", "SELECT workerpool_enqueue(task, payload)"),
    ("enqueue_copy_raw_us", None, None, "COPY of 1,000 rows per statement, plain psycopg"),
    ("enqueue_bulk_us", "enqueue_copy_raw_us", None, "enqueue_many, 1,000 jobs a call"),
    ("claim_raw_us", None, None, "the ceiling's claim, 100 rows, autocommit"),
    ("claim_us", "claim_raw_us", None, "the worker's claim statement, 100 rows a pass"),
    ("outcome_raw_us", None, None, "the ceiling's fenced completion, autocommit"),
    ("outcome_us", "outcome_raw_us", None, "the worker's outcome write (done), 100 rows a pass"),
    ("pass_raw_us", None, None, "the ceiling's claim + completion"),
    ("pass_us", "pass_raw_us", None, "the worker's pass: BEGIN, outcome write, claim, COMMIT"),
    ("drain_us", "pass_us", None, "1 workerpool run child draining N: every backend it opened"),
)
#: (figure, reference, note): jobs/s per server core.
PER_CORE_FIGURES = (
    ("raw_jobs_per_core", None, "1e6 / (raw enqueue + raw pass)"),
    ("jobs_per_core", "raw_jobs_per_core", "1e6 / (pool.enqueue + the worker's pass)"),
    ("drain_jobs_per_core", "jobs_per_core", "1e6 / (pool.enqueue + the drain's backends)"),
    ("bulk_jobs_per_core", "jobs_per_core", "1e6 / (enqueue_many + the worker's pass)"),
)


def declare(report: Report, jobs: int, single: int) -> None:
    for what, ref, also, note in SERVER_US:
        count = single if what in ("enqueue_raw_us", "enqueue_us", "enqueue_sql_us") else jobs
        report.declare(
            name(what),
            "us/job",
            ratio_to=ref and name(ref),
            also_to=also and name(also),
            note=f"server CPU: {note} ({count:,} jobs)",
        )
    for what, ref, note in PER_CORE_FIGURES:
        report.declare(name(what), PER_CORE, ratio_to=ref and name(ref), note=note)


# -- reading the server's CPU ---------------------------------------------------------------------


def backend_cpu_s(pid: int) -> float:
    """CPU seconds the process ``pid`` has used: schedstat's nanoseconds, else stat's ticks."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return supervised.cpu_seconds(pid)


def is_local_postgres(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/stat").read_text().split("(", 1)[1].rsplit(")", 1)[0]
    except (OSError, IndexError):
        return False
    return command.startswith("postgres")


def backend_pid(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


class ServerCPU:
    """The CPU of the bench database's client backends, but the one this reads with."""

    def __init__(self, bench_db: BenchDatabase) -> None:
        self.db = bench_db
        self.me = bench_db.sql("SELECT pg_backend_pid()")[0][0]
        if not is_local_postgres(self.me):
            raise RuntimeError(
                f"capacity: the server's backend {self.me} is not a postgres process of this"
                " machine; the section reads /proc, so run it where the server runs (the"
                " embedded one, or --url to a server on this host)"
            )

    def pids(self) -> list[int]:
        rows = self.db.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in rows]

    def snapshot(self, exclude: frozenset[int] = frozenset()) -> dict[int, float]:
        return {pid: backend_cpu_s(pid) for pid in self.pids() if pid not in exclude}

    def since(self, before: dict[int, float], exclude: frozenset[int] = frozenset()) -> float:
        """CPU seconds since ``before`` (a backend that connected since counts from zero)."""
        now = self.snapshot(exclude)
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


def per_core(*us_per_job: float) -> float:
    """Jobs per second one core of the server allows, at these µs of its CPU per job."""
    total = sum(us_per_job)
    return 1e6 / total if total > 0 else float("inf")


def timed_server(cpu: ServerCPU, call: Callable[[], object]) -> float:
    """Server CPU seconds of the bench database's backends while ``call`` runs."""
    before = cpu.snapshot()
    call()
    return cpu.since(before)


# -- the phases ------------------------------------------------------------------------------------


class Capacity:
    """Measures the ``capacity`` section into ``report``, one repeat per :meth:`measure`."""

    def __init__(
        self,
        bench_db: BenchDatabase,
        pool: WorkerPool,
        report: Report,
        launcher: supervised.Launcher,
        *,
        jobs: int,
        single: int,
    ) -> None:
        self.db = bench_db
        self.pool = pool
        self.report = report
        self.launcher = launcher
        self.jobs = jobs
        self.single = single
        self.cpu = ServerCPU(bench_db)

    def add(self, what: str, value: float) -> None:
        self.report.add(name(what), value)

    def measure(self) -> None:
        us: dict[str, float] = {}
        us.update(self.single_enqueues())
        us.update(self.worker_passes())
        us.update(self.floor_passes())
        us["drain_us"] = self.drain()
        for what, value in us.items():
            self.add(what, value)
        self.add("raw_jobs_per_core", per_core(us["enqueue_raw_us"], us["pass_raw_us"]))
        self.add("jobs_per_core", per_core(us["enqueue_us"], us["pass_us"]))
        self.add("drain_jobs_per_core", per_core(us["enqueue_us"], us["drain_us"]))
        self.add("bulk_jobs_per_core", per_core(us["enqueue_bulk_us"], us["pass_us"]))
        log.info(
            "capacity: server CPU per job: enqueue %.0f us (SQL door %.0f, bulk %.1f), claim"
            " %.1f, outcome %.1f, pass %.1f, drain %.1f us: %.0f jobs/s per core",
            us["enqueue_us"],
            us["enqueue_sql_us"],
            us["enqueue_bulk_us"],
            us["claim_us"],
            us["outcome_us"],
            us["pass_us"],
            us["drain_us"],
            per_core(us["enqueue_us"], us["pass_us"]),
        )

    # single enqueues: the raw floor, pool.enqueue and the SQL door, in rotating blocks

    def single_enqueues(self) -> dict[str, float]:
        self.db.reset()
        pool = self.pool
        pool.register_tasks()
        enqueue.warm_up(pool)
        server = {"raw": 0.0, "pool": 0.0, "sql": 0.0}
        with psycopg.connect(self.db.dsn, autocommit=True) as conn:

            def raw(start: int, end: int) -> None:
                for i in range(start, end):
                    conn.execute(
                        floors.ENQUEUE_NOTIFY_SQL,
                        (QUEUE, noop.__name__, json.dumps({"i": i}), floors.CHANNEL, QUEUE),
                    )

            def ours(start: int, end: int) -> None:
                for i in range(start, end):
                    pool.enqueue(noop.__name__, {"i": i})

            def door(start: int, end: int) -> None:
                for i in range(start, end):
                    conn.execute(doors.SQL_ENQUEUE, (noop.__name__, json.dumps({"i": i})))

            def counted(kind: str, loop: enqueue.BlockLoop) -> enqueue.BlockLoop:
                def run(start: int, end: int) -> None:
                    server[kind] += timed_server(self.cpu, lambda: loop(start, end))

                return run

            raw(0, doors.WARM)
            door(0, doors.WARM)
            loops = {"raw": raw, "pool": ours, "sql": door}
            enqueue.rotating_blocks({k: counted(k, loop) for k, loop in loops.items()}, self.single)
        return {
            f"enqueue_{suffix}us": server[kind] * 1e6 / self.single
            for kind, suffix in (("raw", "raw_"), ("pool", ""), ("sql", "sql_"))
        }

    # the worker's pass, on the N jobs enqueue_many writes

    def worker_passes(self) -> dict[str, float]:
        self.db.reset()
        bulk = timed_server(self.cpu, lambda: enqueue.load_for_drain(self.pool, self.jobs))
        self.db.vacuum()
        versions = self.pool.registry.task_versions(QUEUE)
        spent = {"claim": 0.0, "outcome": 0.0, "pass": 0.0}
        done = 0
        with self.pool.engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            conn.commit()
            claimed: list = []
            while True:
                began = backend_cpu_s(pid)
                with conn.begin():
                    if claimed:
                        leases = [(Lease(row.id, row.attempts, WORKER), DONE) for row in claimed]
                        at = backend_cpu_s(pid)
                        record_settling(conn, WORKER, leases)
                        spent["outcome"] += backend_cpu_s(pid) - at
                        done += len(claimed)
                    at = backend_cpu_s(pid)
                    claimed = sql.claim(
                        conn, queue=QUEUE, worker=WORKER, limit=PASS_ROWS, task_versions=versions
                    )
                    spent["claim"] += backend_cpu_s(pid) - at
                spent["pass"] += backend_cpu_s(pid) - began
                if not claimed:
                    break
        self.check_done(done, "the worker's passes")
        return {
            "enqueue_bulk_us": bulk * 1e6 / self.jobs,
            **{f"{what}_us": seconds * 1e6 / self.jobs for what, seconds in spent.items()},
        }

    # the ceiling's two statements, on the N rows a raw COPY writes

    def floor_passes(self) -> dict[str, float]:
        self.db.reset()
        spent = {"claim": 0.0, "outcome": 0.0, "copy": 0.0}
        done = 0
        params = {"me": WORKER, "queue": QUEUE, "limit": PASS_ROWS}
        with psycopg.connect(self.db.dsn, autocommit=True) as conn:
            pid = backend_pid(conn)  # read while it lives: a closed backend's CPU is gone
            for start in range(0, self.jobs, enqueue.BULK_BATCH):
                payloads = [
                    json.dumps({"i": i})
                    for i in range(start, min(self.jobs, start + enqueue.BULK_BATCH))
                ]
                at = backend_cpu_s(pid)
                with conn.cursor().copy(floors.COPY_SQL) as copy:
                    for payload in payloads:
                        copy.write_row((QUEUE, noop.__name__, payload))
                spent["copy"] += backend_cpu_s(pid) - at
            self.db.vacuum()
            while True:
                at = backend_cpu_s(pid)
                rows = conn.execute(ceiling.CLAIM_SQL, params).fetchall()
                spent["claim"] += backend_cpu_s(pid) - at
                if not rows:
                    break
                at = backend_cpu_s(pid)
                conn.execute(ceiling.COMPLETE_SQL, {"ids": [row[0] for row in rows], "me": WORKER})
                spent["outcome"] += backend_cpu_s(pid) - at
                done += len(rows)
        self.check_done(done, "the ceiling's passes")
        per_job = {
            f"{what}_raw_us": seconds * 1e6 / self.jobs
            for what, seconds in spent.items()
            if what != "copy"
        }
        per_job["pass_raw_us"] = per_job["claim_raw_us"] + per_job["outcome_raw_us"]
        per_job["enqueue_copy_raw_us"] = spent["copy"] * 1e6 / self.jobs
        return per_job

    def check_done(self, done: int, what: str) -> None:
        if done != self.jobs:
            raise RuntimeError(f"capacity, {what}: {done} of {self.jobs} jobs done")

    # a real worker child

    def drain(self) -> float:
        """Server CPU per job of every backend a one-child ``workerpool run`` opened, over the
        drain of N no-op jobs (the bench's own connections, open before it starts, left out)."""
        self.db.reset()
        ours = frozenset(self.cpu.pids())
        with self.launcher.running(1) as supervisors:
            before = self.cpu.snapshot(ours)
            enqueue.load_for_drain(self.pool, self.jobs)
            supervised.wait_drained(self.db, self.jobs, supervisors)
            spent = self.cpu.since(before, ours)
        done, _ = self.db.drain_window()
        self.check_done(done, "the drain")
        return spent * 1e6 / self.jobs


__all__ = ["Capacity", "ServerCPU", "backend_cpu_s", "declare"]
