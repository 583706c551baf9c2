"""The SQL door against the plain path: ``SELECT workerpool_enqueue(task, payload)`` on plain
psycopg, one autocommit statement per job (what ``psql``, another language's driver or a
trigger sends; docs/doors.md), against ``pool.enqueue`` without ``conn=`` and against the raw
floor (one autocommit INSERT with the workers' NOTIFY, the single figure's floor).

The three take turns in blocks of 50 jobs into the same queue, their order rotating each block
(``enqueue.rotating_blocks``): jobs per second of each and each one's client CPU per job. The
SQL door does its checks on the server (the registered task's row, the payload's type and size,
the queue's bound), so its client CPU is the raw loop's and its server CPU is what grows: the
``capacity`` section measures that.
"""

from __future__ import annotations

import json
import logging

import psycopg

from workerpool import WorkerPool

from . import enqueue
from .app import noop
from .report import Report

log = logging.getLogger("workerpool.bench")

#: The door as a producer without the application's code calls it: task and payload only.
SQL_ENQUEUE = "SELECT workerpool_enqueue(%s, %s::jsonb)"
KINDS = ("raw", "pool", "sql")
WARM = 10  # statements per loop before the clock: past psycopg's prepare threshold (5)


def figure(kind: str, suffix: str = "per_s") -> str:
    return f"doors_{kind}_{suffix}"


def declare(report: Report, count: int) -> None:
    raw, pool, sql = (figure(kind) for kind in KINDS)
    report.declare(raw, "jobs/s", note=f"{count:,} autocommit INSERT + NOTIFY, plain psycopg")
    report.declare(pool, "jobs/s", ratio_to=raw, note="pool.enqueue without conn=")
    report.declare(
        sql,
        "jobs/s",
        ratio_to=pool,
        also_to=raw,
        note="SELECT workerpool_enqueue(task, payload), plain psycopg, autocommit",
    )
    raw_cpu, pool_cpu, sql_cpu = (figure(kind, "cpu_us") for kind in KINDS)
    report.declare(raw_cpu, "us/job", note="client CPU of the raw loop")
    report.declare(pool_cpu, "us/job", ratio_to=raw_cpu, note="client CPU of pool.enqueue")
    report.declare(
        sql_cpu,
        "us/job",
        ratio_to=pool_cpu,
        also_to=raw_cpu,
        note="client CPU of the SQL door (its checks run on the server)",
    )


def measure(report: Report, pool: WorkerPool, dsn: str, count: int) -> None:
    """One round of the three loops, ``count`` jobs each, on an emptied jobs table."""
    pool.register_tasks()  # what a deploy step does: the door knows the bench's tasks
    enqueue.warm_up(pool)
    notify = pool.registry.notify
    with psycopg.connect(dsn, autocommit=True) as conn:
        raw = enqueue.raw_singles(conn, notify)

        def ours(start: int, end: int) -> None:
            for i in range(start, end):
                pool.enqueue(noop.__name__, {"i": i})

        def door(start: int, end: int) -> None:
            for i in range(start, end):
                conn.execute(SQL_ENQUEUE, (noop.__name__, json.dumps({"i": i}))).fetchone()

        raw(0, WARM)
        door(0, WARM)
        wall, cpu = enqueue.rotating_blocks({"raw": raw, "pool": ours, "sql": door}, count)
    for kind in KINDS:
        report.add(figure(kind), count / wall[kind])
        report.add(figure(kind, "cpu_us"), cpu[kind] * 1e6 / count)
    log.info(
        "SQL door: %.0f jobs/s against pool.enqueue %.0f and raw %.0f",
        count / wall["sql"],
        count / wall["pool"],
        count / wall["raw"],
    )


__all__ = ["SQL_ENQUEUE", "declare", "measure"]
