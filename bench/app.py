"""The application the benchmark runs: ``workerpool run bench.app:pool``.

Seven handlers on one queue: ``noop`` (the drain), ``stamp``, which records when it started so
the benchmark can compute pickup latency, ``nap``, a short sleep (the kill -9 burst, so that
every kill finds jobs in flight), ``stepped``, ten durable steps that do nothing, ``spin``,
pure-Python work (the processes comparison), ``chatty``, two log records (the logs
section), and ``typed_noop``, ``noop`` with typed arguments (the typed section). ``stamp``
appends one short line to a file (``$BENCH_STAMP_FILE``) with an ``O_APPEND`` write: one
syscall, no database round trip, so it perturbs the worker far less than writing the time into
a table would. The times are ``time.monotonic()``, which on Linux
is ``CLOCK_MONOTONIC``: one clock for every process on the machine, so the enqueuing process
and the worker child can be compared directly.

Notifications are on unless ``$BENCH_NOTIFY`` is ``0``; the queue's concurrency is
``$BENCH_CONCURRENCY`` (default 100, see ``DEFAULT_CONCURRENCY``); ``$BENCH_RETENTION``
(seconds) replaces the maintenance child's retention of finished rows (the soak keeps a short
window, so that the table's size settles within the run); ``$BENCH_LIMITS`` picks one of
``LIMIT_SETTINGS`` (the limits comparison).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import text
from sqlalchemy.engine import URL

from workerpool import Job, WorkerPool

QUEUE = "bench"
STAMP_FILE_ENV = "BENCH_STAMP_FILE"
NOTIFY_ENV = "BENCH_NOTIFY"
CONCURRENCY_ENV = "BENCH_CONCURRENCY"
RETENTION_ENV = "BENCH_RETENTION"
PREFETCH_ENV = "BENCH_PREFETCH"
LIMITS_ENV = "BENCH_LIMITS"
#: ``1``: the bench queue keeps its handlers' log records (the logs section, ``capture_logs``).
CAPTURE_LOGS_ENV = "BENCH_CAPTURE_LOGS"
#: The limits comparison's configurations (``bench.limits``): queue and task settings, each on
#: but not binding at the bench's throughput.
LIMIT_SETTINGS: dict[str, dict[str, dict]] = {
    "off": {},
    "global": {"queue": {"global_concurrency": 100_000}},
    "rate": {"queue": {"rate_limit": "1000000/s"}},
    "key": {"task": {"concurrency_limit": 1}},
}
#: The bench queue prefetches 50: ``$BENCH_PREFETCH`` overrides; ``default`` (also for
#: ``$BENCH_CONCURRENCY``) leaves the library's own default in place.
LIBRARY_DEFAULT = "default"
BENCH_PREFETCH = os.environ.get(PREFETCH_ENV, "50")
#: The ceiling loop claims 100 rows per round trip; a worker claims as many rows as it has free
#: handler slots, so the bench queue runs 100 to compare like with like (``--concurrency 10``
#: measures the library's default, where a pass can claim at most 10).
DEFAULT_CONCURRENCY = 100
#: A ``nap`` job's sleep when its payload names none.
NAP_MS = 10.0

_stamp_fd: tuple[int, int] | None = None  # (pid, fd): opened after the fork, in the child


def noop(job: Job) -> None:
    """The drain's job: nothing at all, so only the queue's own cost is measured."""


def stamp(job: Job) -> None:
    """Record ``<job id> <monotonic seconds>`` the moment the handler starts."""
    started = time.monotonic()
    os.write(_stamp_file(), f"{job.id} {started!r}\n".encode())


def nap(job: Job) -> None:
    """The burst's job (``bench.burst``): sleep ``payload["ms"]`` milliseconds."""
    time.sleep(float(job.payload.get("ms", NAP_MS)) / 1000.0)


#: Steps of a ``stepped`` job (the steps section: a 10-step job against 10 plain jobs).
STEPS = 10


def stepped(job: Job) -> None:
    """``STEPS`` durable steps that do nothing: only the steps' own cost is measured."""
    for number in range(STEPS):
        job.step(f"s{number}", lambda: None)


#: The effect the once section's jobs write (``bench.once``), made by that section.
EFFECTS_TABLE = "CREATE TABLE IF NOT EXISTS bench_effects (job_id bigint NOT NULL)"
_EFFECT = text("INSERT INTO bench_effects (job_id) VALUES (:job_id)")


def effect_tasks(pool: WorkerPool) -> None:
    """``effect_plain`` writes one row in a transaction of its own and returns (the worker then
    writes ``done``); ``effect_once`` writes the same row and ends its job in that transaction
    (``job.complete_in``)."""

    def effect_plain(job: Job) -> None:
        with pool.engine.begin() as conn:
            conn.execute(_EFFECT, {"job_id": job.id})

    def effect_once(job: Job) -> None:
        with pool.engine.begin() as conn:
            conn.execute(_EFFECT, {"job_id": job.id})
            job.complete_in(conn)

    pool.task(effect_plain, queue=QUEUE)
    pool.task(effect_once, queue=QUEUE)


_chatty_log = logging.getLogger("bench.chatty")


def chatty(job: Job) -> None:
    """The logs section's job: two WARNING records (the level ``workerpool run`` lets through
    in the bench), kept per attempt when the queue captures them."""
    _chatty_log.warning("job %s starts", job.id)
    _chatty_log.warning("job %s is done", job.id)


def spin(job: Job) -> None:
    """The CPU-bound job (``bench.processes``): ``payload["iters"]`` rounds of pure Python,
    calibrated by the bench to about 2 ms of CPU. Fixed work, not a fixed time: under the GIL
    a second thread of the same process gets no more done."""
    spin_loop(int(job.payload["iters"]))


def spin_loop(iters: int) -> int:
    total = 0
    for i in range(iters):
        total += i * i % 7
    return total


@dataclass
class Order:
    """The typed section's argument (``bench.typed``): the JSON of a small order."""

    id: int
    customer: str
    total: Decimal
    placed: datetime
    lines: list[str]


def typed_noop(job: Job, order: Order, note: str = "") -> None:
    """``noop`` with typed arguments: only their conversion is measured against it."""


def _stamp_file() -> int:
    global _stamp_fd
    if _stamp_fd is None or _stamp_fd[0] != os.getpid():
        path = os.environ[STAMP_FILE_ENV]
        _stamp_fd = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    return _stamp_fd[1]


def make_pool(
    url: str | URL | None = None,
    *,
    notify: bool = True,
    concurrency: int | str = DEFAULT_CONCURRENCY,
    limits: str = "off",
    max_pending: int | None = None,
) -> WorkerPool:
    """The benchmark's pool; ``url=None`` means ``$WORKERPOOL_DATABASE_URL``; ``max_pending``
    bounds its queue (the bounded single enqueue)."""
    pool = WorkerPool(url, notify=notify)
    settings = LIMIT_SETTINGS[limits]
    tuning = {}
    if concurrency != LIBRARY_DEFAULT:
        tuning["concurrency"] = int(concurrency)
    if BENCH_PREFETCH != LIBRARY_DEFAULT:
        tuning["prefetch"] = int(BENCH_PREFETCH)
    capture = os.environ.get(CAPTURE_LOGS_ENV) == "1"
    if max_pending is not None:
        tuning["max_pending"] = max_pending
    pool.queue(QUEUE, notify=notify, capture_logs=capture, **tuning, **settings.get("queue", {}))
    pool.task(noop, queue=QUEUE, **settings.get("task", {}))
    pool.task(stamp, queue=QUEUE)
    pool.task(nap, queue=QUEUE)
    pool.task(stepped, queue=QUEUE)  # after noop: the claim's task CASE still matches noop first
    pool.task(spin, queue=QUEUE)
    pool.task(chatty, queue=QUEUE)
    pool.task(typed_noop, queue=QUEUE)
    effect_tasks(pool)
    if os.environ.get(RETENTION_ENV):
        pool.maintenance(retention=float(os.environ[RETENTION_ENV]))
    return pool


def notify_from_env() -> bool:
    return os.environ.get(NOTIFY_ENV, "1") != "0"


if os.environ.get("BENCH_CLAIM_TIMES"):  # the fleet figure times the children's claims
    from .claim_timer import install

    install(os.environ["BENCH_CLAIM_TIMES"])

pool = make_pool(
    notify=notify_from_env(),
    concurrency=os.environ.get(CONCURRENCY_ENV, str(DEFAULT_CONCURRENCY)),
    limits=os.environ.get(LIMITS_ENV, "off"),
)
