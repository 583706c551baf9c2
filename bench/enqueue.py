"""Figure 4, enqueue: bulk ``enqueue_many`` rows/s and single transactional enqueues per second.

Each has a plain-psycopg reference measured in the same run (the floor this machine allows for
the same rows): a ``COPY`` of the payloads alone (and the older ``INSERT ... SELECT FROM
unnest(jsonb[])``), interleaved batch by batch with ``enqueue_many``, and one ``INSERT`` per
``BEGIN``/``COMMIT``. workerpool adds validation, keys, ids in input order and the NOTIFY on top.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import psycopg

from workerpool import WorkerPool

from . import floors
from .app import QUEUE, make_pool, noop

BULK_BATCH = 1000


def payloads(count: int, start: int = 0) -> list[tuple[str, dict]]:
    return [(noop.__name__, {"i": i}) for i in range(start, start + count)]


#: One loop of the bulk comparison: it writes the rows of one batch, given its start.
BatchLoop = Callable[[int], None]


def interleaved_rows_per_second(
    loops: dict[str, BatchLoop], bounds: list[tuple[int, int]]
) -> dict[str, float]:
    """Each batch ``(start, end)`` through every loop in turn, the order rotating each round so
    that no loop always follows another: rows/s of each. A shared machine's load moves within
    seconds; so each loop sees the same moments of it, and the same growing table."""
    names = list(loops)
    wall = dict.fromkeys(names, 0.0)
    for round_number, (start, _) in enumerate(bounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            began = time.perf_counter()
            loops[name](start)
            wall[name] += time.perf_counter() - began
    rows = sum(end - start for start, end in bounds)
    return {name: rows / seconds for name, seconds in wall.items()}


def bulk_comparison(
    pool: WorkerPool, dsn: str, total: int, batch: int = BULK_BATCH
) -> dict[str, float]:
    """Rows/s of plain psycopg ``COPY`` and ``INSERT ... unnest(jsonb[])`` (autocommit, payload
    texts built before the clock starts) and of ``enqueue_many`` without keys and with a new
    key per job, ``batch`` rows a call, interleaved (:func:`interleaved_rows_per_second`)."""
    bounds = [(start, min(total, start + batch)) for start in range(0, total, batch)]
    texts = {start: [json.dumps({"i": i}) for i in range(start, end)] for start, end in bounds}
    items = {start: payloads(end - start, start) for start, end in bounds}
    keyed = {
        start: [(task, payload, {"key": f"bulk:{payload['i']}"}) for task, payload in batch_items]
        for start, batch_items in items.items()
    }
    with psycopg.connect(dsn, autocommit=True) as conn:

        def raw_copy(start: int) -> None:
            with conn.cursor().copy(floors.COPY_SQL) as copy:
                for payload in texts[start]:
                    copy.write_row((QUEUE, noop.__name__, payload))

        def raw_unnest(start: int) -> None:
            conn.execute(RAW_BULK_SQL, (QUEUE, noop.__name__, texts[start]))

        conn.execute(RAW_BULK_SQL, (QUEUE, noop.__name__, texts[0][:1]))  # warm, untimed
        loops: dict[str, BatchLoop] = {
            "raw_copy": raw_copy,
            "raw_unnest": raw_unnest,
            "pool": lambda start: pool.enqueue_many(items[start]),
            "pool_keyed": lambda start: pool.enqueue_many(keyed[start]),
        }
        return interleaved_rows_per_second(loops, bounds)


def single_per_second(pool: WorkerPool, count: int) -> float:
    """One job per transaction, written in the caller's transaction (``conn=``), then committed."""
    started = time.perf_counter()
    for i in range(count):
        with pool.engine.begin() as conn:
            pool.enqueue(noop.__name__, {"i": i}, conn=conn)
    return count / (time.perf_counter() - started)


#: Jobs per block in :func:`single_pair`: small, so every loop sees the same moment of the machine.
PAIR_BLOCK = 50
#: The bound of the bounded single enqueue's queue: one the run never reaches, so every enqueue
#: is accepted. Each takes from the queue's credit (a hundredth of the bound, 10,000 here); the
#: first of a run, and one in 10,000 after it, counts the queue's waiting jobs to grant it.
BOUNDED_MAX_PENDING = 1_000_000


def raw_singles(conn: psycopg.Connection, notify: bool) -> Callable[[int, int], None]:
    """The raw floor's loop: one autocommit ``INSERT ... RETURNING id`` per job on ``conn``,
    with the workers' NOTIFY in the statement when the pool sends one (the same work)."""

    def raw(start: int, end: int) -> None:
        for i in range(start, end):
            payload = json.dumps({"i": i})
            if notify:
                conn.execute(
                    floors.ENQUEUE_NOTIFY_SQL,
                    (QUEUE, noop.__name__, payload, floors.CHANNEL, QUEUE),
                )
            else:
                conn.execute(RAW_SINGLE_SQL, (QUEUE, noop.__name__, payload))

    return raw


def single_pair(
    pool: WorkerPool, dsn: str, count: int, bounded: WorkerPool | None = None
) -> dict[str, float]:
    """``enqueue()`` without ``conn=`` against one autocommit ``INSERT ... RETURNING id`` per job
    on a plain psycopg connection, in alternating blocks of :data:`PAIR_BLOCK` jobs (a shared
    machine's load moves within seconds): jobs/s of each, and each one's client CPU per job.
    With ``bounded`` (the same app with its queue bounded: ``max_pending``), its ``enqueue()``
    too (``bounded_per_s``), each block of the three in a rotating order, into the same queue.

    When the pool sends the workers' wake-up NOTIFY with each job (the bench's default), the
    raw insert sends the same NOTIFY in its statement, as the pickup floor's does: the same work.
    """
    names = ["raw", "pool"] + (["bounded"] if bounded is not None else [])
    notify = pool.registry.notify
    with psycopg.connect(dsn, autocommit=True) as conn:
        raw = raw_singles(conn, notify)

        def ours(start: int, end: int) -> None:
            for i in range(start, end):
                pool.enqueue(noop.__name__, {"i": i})

        def ours_bounded(start: int, end: int) -> None:
            assert bounded is not None
            for i in range(start, end):
                bounded.enqueue(noop.__name__, {"i": i})

        loops = {"raw": raw, "pool": ours, "bounded": ours_bounded}
        raw(0, 10)  # past psycopg's prepare threshold, like warm_up for the pool
        wall, cpu = rotating_blocks({name: loops[name] for name in names}, count)
    rates = {
        "raw_per_s": count / wall["raw"],
        "pool_per_s": count / wall["pool"],
        "raw_cpu_us": cpu["raw"] * 1e6 / count,
        "pool_cpu_us": cpu["pool"] * 1e6 / count,
    }
    if bounded is not None:
        rates["bounded_per_s"] = count / wall["bounded"]
    return rates


#: One loop of :func:`rotating_blocks`: it enqueues the jobs ``start`` to ``end`` (excluded).
BlockLoop = Callable[[int, int], None]


def rotating_blocks(
    loops: dict[str, BlockLoop], count: int, block: int = PAIR_BLOCK
) -> tuple[dict[str, float], dict[str, float]]:
    """Jobs ``0..count`` through every loop, in blocks of ``block`` jobs, the loops' order
    rotating each block so that none always runs right after another: the wall and client CPU
    seconds each loop took in all."""
    names = list(loops)
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    for number, start in enumerate(range(0, count, block)):
        end = min(count, start + block)
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            began, began_cpu = time.perf_counter(), time.process_time()
            loops[name](start, end)
            wall[name] += time.perf_counter() - began
            cpu[name] += time.process_time() - began_cpu
    return wall, cpu


RAW_BULK_SQL = (
    "INSERT INTO workerpool_jobs (queue, task, payload)"
    " SELECT %s, %s, p FROM unnest(%s::jsonb[]) AS p"
)
RAW_SINGLE_SQL = (
    "INSERT INTO workerpool_jobs (queue, task, payload) VALUES (%s, %s, %s) RETURNING id"
)


def raw_single_per_second(dsn: str, count: int) -> float:
    """The reference: ``BEGIN; INSERT ... RETURNING id; COMMIT`` per job on one connection."""
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        _raw_single_loop(conn, count)
        return count / (time.perf_counter() - started)


def _raw_single_loop(conn: psycopg.Connection, count: int) -> None:
    for i in range(count):
        with conn.transaction():
            conn.execute(RAW_SINGLE_SQL, (QUEUE, noop.__name__, json.dumps({"i": i})))


#: Callers in the concurrent single-enqueue figures: processes, as a web server's workers are.
CALLERS = 4


def concurrent_per_second(
    make_caller: Callable[[Any], Callable[[int], None]],
    target: Any,
    count: int,
    callers: int = CALLERS,
) -> float:
    """``count // callers`` jobs in each of ``callers`` forked processes started together;
    jobs/s from the first caller's start to the last caller's end. ``make_caller(target)``
    runs in the process before the clock starts (connect, warm up) and returns the loop."""
    context = multiprocessing.get_context("fork")
    go, spans = context.Event(), context.Queue()
    each = max(1, count // callers)
    procs = [
        context.Process(target=_timed_caller, args=(make_caller, target, each, go, spans))
        for _ in range(callers)
    ]
    for proc in procs:
        proc.start()
    go.set()
    results = [spans.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    if any(isinstance(result, str) for result in results):
        raise RuntimeError(f"a caller failed: {next(r for r in results if isinstance(r, str))}")
    started, ended = min(r[0] for r in results), max(r[1] for r in results)
    return each * callers / (ended - started)


def _timed_caller(make_caller, target: Any, count: int, go, spans) -> None:
    try:
        run = make_caller(target)
        run(1)  # connected and warm before the clock starts
        go.wait(60)
        started = time.monotonic()
        run(count)
        spans.put((started, time.monotonic()))
    except BaseException as exc:  # the parent must hear about it, never hang on the queue
        spans.put(f"{type(exc).__name__}: {exc}")


def single_caller(url: Any) -> Callable[[int], None]:
    """A caller process's loop on its own pool (never an engine inherited over the fork)."""
    pool = make_pool(url)

    def run(count: int) -> None:
        single_per_second(pool, count)

    return run


def raw_single_caller(dsn: str) -> Callable[[int], None]:
    conn = psycopg.connect(dsn)
    return lambda count: _raw_single_loop(conn, count)


def load_for_drain(pool: WorkerPool, total: int, chunk: int = 5000) -> None:
    """``total`` no-op jobs in bulk, committed in one transaction so they appear together."""
    with pool.engine.begin() as conn:
        for start in range(0, total, chunk):
            pool.enqueue_many(payloads(min(chunk, total - start), start), conn=conn)


def warm_up(pool: WorkerPool) -> None:
    """Connect and compile the statements once, outside any timed window."""
    pool.enqueue_many(payloads(10))
    for _ in range(10):  # past psycopg's prepare threshold (5), like the raw loops' warm-up
        pool.enqueue(noop.__name__, {"warm": True})
        with pool.engine.begin() as conn:
            pool.enqueue(noop.__name__, {"warm": True}, conn=conn)


__all__ = [
    "bulk_comparison",
    "concurrent_per_second",
    "load_for_drain",
    "raw_single_caller",
    "raw_single_per_second",
    "rotating_blocks",
    "single_caller",
    "single_pair",
    "single_per_second",
    "warm_up",
]
