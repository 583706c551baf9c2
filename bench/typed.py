"""Typed tasks: what checking and converting a handler's arguments costs (docs/typed-tasks.md).

``typed_noop`` (an ``Order`` dataclass of five fields, a ``Decimal`` and a ``datetime`` among
them) against ``noop`` given the very same JSON, interleaved (which goes first alternates per
repeat): the conversion alone in Python (the enqueue's check and the claim's rebuild, in
microseconds per job), single enqueues per second (``task.enqueue`` against ``pool.enqueue``,
one autocommit INSERT each), bulk ``enqueue_many`` rows per second, and a drain by one
``workerpool run`` child (jobs per second from the rows' own timestamps, database clock).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from workerpool import Job, WorkerPool
from workerpool.client.tasks import wrap

from .app import Order, noop, typed_noop
from .database import every_job
from .report import Report
from .supervised import Launcher, wait_drained

log = logging.getLogger("workerpool.bench")

KINDS = ("dict", "typed")
BULK = 1000  # rows per enqueue_many call
CONVERSIONS = 20_000  # timed checks and rebuilds per kind, in Python alone
PLACED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def order(i: int) -> Order:
    return Order(i, f"customer-{i % 97}", Decimal("12.50"), PLACED, ["book", "pen"])


def payload(i: int) -> dict[str, Any]:
    """The JSON both tasks get: what ``typed_noop``'s check stores for ``order(i)``."""
    return {
        "order": {
            "id": i,
            "customer": f"customer-{i % 97}",
            "total": "12.50",
            "placed": "2026-11-30T12:00:00Z",
            "lines": ["book", "pen"],
        }
    }


def declare(report: Report, jobs: int, single: int) -> None:
    for step, unit in (("check", "us/job"), ("rebuild", "us/job")):
        report.declare(f"typed_{step}_dict_us", unit, note=f"{step}, the dict task (Python only)")
        report.declare(
            f"typed_{step}_typed_us", unit, ratio_to=f"typed_{step}_dict_us", note="the typed task"
        )
    for step, unit, note in (
        ("single", "jobs/s", f"{single:,} enqueues, one autocommit INSERT each"),
        ("bulk", "rows/s", f"{jobs:,} rows by enqueue_many, {BULK} a call"),
        ("drain", "jobs/s", f"{jobs:,} jobs drained by 1 worker child"),
    ):
        report.declare(f"typed_{step}_dict", unit, note=f"{note}: the dict task")
        report.declare(
            f"typed_{step}_typed", unit, ratio_to=f"typed_{step}_dict", note="the typed task"
        )


def measure(
    report: Report, launcher: Launcher, pool: WorkerPool, jobs: int, single: int, repeat: int
) -> None:
    order_of_kinds = KINDS if repeat % 2 == 0 else KINDS[::-1]
    for kind in order_of_kinds:
        report.add(f"typed_check_{kind}_us", _check_us(pool, kind))
        report.add(f"typed_rebuild_{kind}_us", _rebuild_us(pool, kind))
    for kind in order_of_kinds:
        launcher.db.reset()
        report.add(f"typed_single_{kind}", _single(pool, kind, single))
        launcher.db.reset()
        report.add(f"typed_bulk_{kind}", _bulk(pool, kind, jobs))
        rate = _drain(launcher, pool, kind, jobs)
        report.add(f"typed_drain_{kind}", rate)
        log.info("typed section, %s task: drain %.0f jobs/s", kind, rate)


def _check_us(pool: WorkerPool, kind: str) -> float:
    """What ``pool.build`` (every enqueue's check) costs per job, the database untouched."""
    calls = (
        [lambda i=i: pool.build(noop.__name__, payload(i)) for i in range(CONVERSIONS)]
        if kind == "dict"
        else [
            lambda i=i: pool.build(typed_noop.__name__, {"order": order(i)})
            for i in range(CONVERSIONS)
        ]
    )
    began = time.perf_counter()
    for call in calls:
        call()
    return (time.perf_counter() - began) / CONVERSIONS * 1e6


def _rebuild_us(pool: WorkerPool, kind: str) -> float:
    """What calling the handler on a claimed job costs per job, its arguments rebuilt."""
    spec = pool.registry.task_spec(noop.__name__ if kind == "dict" else typed_noop.__name__)
    job_list = [Job(i, "bench", spec.name, payload(i), 1, 1, 1) for i in range(CONVERSIONS)]
    began = time.perf_counter()
    for job in job_list:
        spec.call(job)
    return (time.perf_counter() - began) / CONVERSIONS * 1e6


def _single(pool: WorkerPool, kind: str, count: int) -> float:
    task = wrap(pool, pool.registry.task_spec(typed_noop.__name__))
    began = time.perf_counter()
    for i in range(count):
        if kind == "dict":
            pool.enqueue(noop, payload(i))
        else:
            task.enqueue(order(i))
    return count / (time.perf_counter() - began)


def _items(kind: str, start: int, end: int) -> list[tuple[str, dict[str, Any]]]:
    if kind == "dict":
        return [(noop.__name__, payload(i)) for i in range(start, end)]
    return [(typed_noop.__name__, {"order": order(i)}) for i in range(start, end)]


def _bulk(pool: WorkerPool, kind: str, jobs: int) -> float:
    batches = [_items(kind, start, min(jobs, start + BULK)) for start in range(0, jobs, BULK)]
    began = time.perf_counter()
    for items in batches:
        pool.enqueue_many(items)
    return jobs / (time.perf_counter() - began)


def _drain(launcher: Launcher, pool: WorkerPool, kind: str, jobs: int) -> float:
    bench_db = launcher.db
    bench_db.reset()
    task = noop.__name__ if kind == "dict" else typed_noop.__name__
    with launcher.running(1) as supervisors:
        for start in range(0, jobs, BULK):
            pool.enqueue_many(_items(kind, start, min(jobs, start + BULK)))
        wait_drained(bench_db, jobs, supervisors)
    done, seconds = bench_db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", f"state = 'done' AND task = '{task}'")
    )[0]
    if done != jobs:
        raise RuntimeError(f"{done} of {jobs} {kind} jobs done")
    return jobs / seconds if seconds else float("inf")
