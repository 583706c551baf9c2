"""``python -m bench --scale 1,2,4,8``: several supervisors on one database (section ``fleet``).

For each count, that many real ``workerpool run bench.app:pool`` supervisors (one worker child
each, the bench queue's tuning) drain the same N no-op jobs from one queue, as the two-child
drain does. Repeats are interleaved: each repeat runs every count once, the order rotating, so a
slow spell of a shared machine spreads over all of them. Per drain:

- jobs/s: first ``claimed_at`` to last ``finished_at`` of the rows (database clock);
- claim p50/p99 and rows per claim: every claim pass of the children that took rows, timed inside
  them (``bench.claim_timer``: BEGIN, the waiting outcomes, the claim, COMMIT); commits per 1,000
  jobs: every transaction the children ran in the drain;
- WAL: the ``wal_sync`` (fsyncs) and ``wal_bytes`` deltas of ``pg_stat_wal`` from the load's
  commit until a second after the supervisors have stopped (a backend publishes its counters
  within a second of going idle, and at exit), over the drain window. The view is
  cluster-wide, so a shared server's other clients are in it: the rate over ``BACKGROUND_S``
  just before, with the supervisors idle, is subtracted (fsyncs and bytes), and its fsync rate
  is reported beside them;
- connections: the most backends of the bench database at once during the drain, other than
  this process's own; primary CPU per job: the CPU those backends used during the drain; worker
  CPU per job: the queue children's.

``--pgbouncer`` adds, for each count, the same drain with the supervisors connected through a
fresh PgBouncer in transaction pooling mode (``bench.bouncer``, ``WORKERPOOL_PGBOUNCER=1``; the
enqueuing process stays direct), the two alternating: then the connections are the bouncer's
server connections, and PgBouncer's own CPU is in neither CPU figure.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from workerpool import WorkerPool
from workerpool.process import settings

from . import bouncer, claim_timer, enqueue, supervised
from .database import BenchDatabase, libpq
from .report import Report, markdown_table, percentile

log = logging.getLogger("workerpool.bench")

DEFAULT_COUNTS = (1, 2, 4, 8)
MAX_COUNT = 32
BACKGROUND_S = 1.0  # the idle window before each drain: other clients' WAL on a shared server
SETTLE_S = 1.0  # a backend publishes its WAL counters within a second of going idle
POLL_S = 0.1
#: (figure suffix, unit, column heading of the per-count table, note)
FIGURES = (
    ("jobs_per_s", "jobs/s", "jobs/s", "total drain rate, rows' database clock"),
    (
        "claim_p50_ms",
        "ms",
        "claim p50 ms",
        "claim pass in the children: BEGIN, outcomes, claim, COMMIT",
    ),
    ("claim_p99_ms", "ms", "claim p99 ms", "the same, p99"),
    ("rows_per_claim", "rows", "rows/claim", "mean rows per claim that took any"),
    ("commits_per_1k_jobs", "commits", "commits/1k jobs", "the children's transactions"),
    (
        "wal_syncs_per_s",
        "fsyncs/s",
        "fsyncs/s",
        "pg_stat_wal.wal_sync over the drain window, less the idle rate",
    ),
    ("wal_syncs_per_1k_jobs", "fsyncs", "fsyncs/1k jobs", "the same per 1000 jobs"),
    (
        "wal_background_syncs_per_s",
        "fsyncs/s",
        "idle fsyncs/s",
        f"wal_sync rate over {BACKGROUND_S:g} s before the drain, supervisors idle",
    ),
    (
        "wal_bytes_per_job",
        "B/job",
        "WAL B/job",
        "pg_stat_wal.wal_bytes per job, less the idle rate",
    ),
    ("connections", "conns", "connections", "most backends of the bench database at once"),
    ("primary_cpu_us_per_job", "us/job", "primary CPU us/job", "CPU of those backends"),
    ("worker_cpu_us_per_job", "us/job", "worker CPU us/job", "CPU of the queue children"),
)


def figure(count: int, suffix: str, bounced: bool = False) -> str:
    return f"fleet_{count}sup{'_bouncer' if bounced else ''}_{suffix}"


def parse_counts(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> ``(1, 2, 4, 8)``; ValueError with a readable message otherwise."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--scale wants comma-separated supervisor counts, got {text!r}") from None
    if not counts or any(not 1 <= c <= MAX_COUNT for c in counts) or len(set(counts)) < len(counts):
        raise ValueError(f"--scale wants distinct counts within 1..{MAX_COUNT}, got {text!r}")
    return counts


def declare(report: Report, counts: tuple[int, ...], *, bouncer: bool = False) -> None:
    """Each count's figures (against the first count's); with ``bouncer``, the same through
    PgBouncer, against the direct ones."""
    base = counts[0]
    for count in counts:
        for suffix, unit, _, note in FIGURES:
            ratio_to = None
            if count != base and suffix in ("jobs_per_s", "claim_p99_ms"):
                ratio_to = figure(base, suffix)
            report.declare(
                figure(count, suffix),
                unit,
                ratio_to=ratio_to,
                note=f"{count} supervisor(s): {note}",
            )
        for suffix, unit, _, note in FIGURES if bouncer else ():
            report.declare(
                figure(count, suffix, True),
                unit,
                ratio_to=figure(count, suffix),
                note=f"{count} supervisor(s) through PgBouncer: {note}",
            )


@dataclass(frozen=True)
class Wal:
    syncs: int
    bytes: int
    at: float  # server clock, epoch seconds

    @classmethod
    def now(cls, bench_db: BenchDatabase) -> Wal:
        syncs, size, at = bench_db.sql(
            "SELECT wal_sync, wal_bytes::bigint, extract(epoch FROM clock_timestamp())::float8"
            " FROM pg_stat_wal"
        )[0]
        return cls(syncs, size, at)


class Backends:
    """The bench database's backends serving the supervisors: count and CPU over a drain."""

    def __init__(self, bench_db: BenchDatabase) -> None:
        self.db = bench_db
        self.ours = set(self.pids())  # this process's connections (the enqueuing pool's too)
        self.start: dict[int, float] = {}
        self.peak = 0

    def pids(self) -> list[int]:
        return [
            pid
            for (pid,) in self.db.sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            )
        ]

    def theirs(self) -> list[int]:
        return [pid for pid in self.pids() if pid not in self.ours]

    def begin(self) -> None:
        self.start = {pid: supervised.cpu_seconds(pid) for pid in self.theirs()}
        self.peak = len(self.start)

    def sample(self) -> None:
        self.peak = max(self.peak, len(self.theirs()))

    def cpu_seconds(self) -> float:
        """CPU since :meth:`begin` (a backend that connected since counts from zero)."""
        return sum(supervised.cpu_seconds(pid) - self.start.get(pid, 0.0) for pid in self.theirs())


class Fleet:
    """Measures the ``fleet`` section into ``report``."""

    def __init__(
        self,
        bench_db: BenchDatabase,
        pool: WorkerPool,
        report: Report,
        workdir: Path,
        *,
        counts: tuple[int, ...],
        n: int,
        repeats: int,
        concurrency: int,
        bouncer: bool = False,
    ) -> None:
        self.db, self.pool, self.report = bench_db, pool, report
        self.counts, self.n, self.repeats = counts, n, repeats
        self.modes = (False, True) if bouncer else (False,)  # through PgBouncer or not
        self.workdir = workdir
        self.launcher = supervised.Launcher(bench_db, workdir, concurrency)
        self._drains = 0

    def run(self) -> None:
        enqueue.warm_up(self.pool)  # the enqueuing pool's connection exists before any count
        for repeat in range(self.repeats):
            shift = repeat % len(self.counts)
            for count in self.counts[shift:] + self.counts[:shift]:
                modes = self.modes if repeat % 2 == 0 else self.modes[::-1]
                for bounced in modes:
                    self.drain(count, bounced)

    def drain(self, count: int, bounced: bool = False) -> None:
        self._drains += 1
        times = self.workdir / f"claims-{self._drains}"
        times.mkdir(mode=0o700)
        env = self.launcher.extra_env
        env[claim_timer.CLAIM_TIMES_ENV] = str(times)
        for name in (settings.PGBOUNCER_ENV, "WORKERPOOL_DATABASE_URL"):
            env.pop(name, None)
        self.db.reset()
        backends = Backends(self.db)  # before the bouncer: none of its connections is ours
        with contextlib.ExitStack() as stack:
            if bounced:
                through = stack.enter_context(bouncer.running(self.db.url))
                env.update({settings.PGBOUNCER_ENV: "1", "WORKERPOOL_DATABASE_URL": libpq(through)})
            self.measure(count, bounced, times, backends)

    def measure(self, count: int, bounced: bool, times: Path, backends: Backends) -> None:
        with self.launcher.running(count) as supervisors:
            time.sleep(SETTLE_S)  # the start-up's counters land before the idle window opens
            idle = Wal.now(self.db)
            time.sleep(BACKGROUND_S)  # the idle window is the measurement, not a wait
            since = time.monotonic()
            enqueue.load_for_drain(self.pool, self.n)
            before = Wal.now(self.db)
            backends.begin()
            worker_cpu = -children_cpu(supervisors)  # their start-up is not the drain's
            self.wait_drained(supervisors, backends)
            until = time.monotonic()
            primary_cpu = backends.cpu_seconds()
            worker_cpu += children_cpu(supervisors)
        time.sleep(SETTLE_S)  # stopped (or, behind the bouncer, idle) backends publish theirs
        after = Wal.now(self.db)
        done, seconds = self.db.drain_window()
        if done != self.n:
            raise RuntimeError(f"fleet drain with {count} supervisors: {done} of {self.n} done")
        values = {
            "jobs_per_s": done / seconds if seconds > 0 else float("inf"),
            **wal_figures(idle, before, after, done, seconds),
            "connections": backends.peak,
            "primary_cpu_us_per_job": primary_cpu * 1e6 / done,
            "worker_cpu_us_per_job": worker_cpu * 1e6 / done,
            **claim_figures(claim_timer.read(times, since, until), done),
        }
        for suffix, value in values.items():
            self.report.add(figure(count, suffix, bounced), value)
        self.log(count, bounced, values)

    def log(self, count: int, bounced: bool, values: dict[str, float]) -> None:
        log.info(
            "fleet, %d supervisor(s)%s: %.0f jobs/s, claim p99 %.2f ms, %.1f rows/claim, "
            "%.1f fsyncs/s (idle %.1f), %d connections",
            count,
            " through PgBouncer" if bounced else "",
            values["jobs_per_s"],
            values["claim_p99_ms"],
            values["rows_per_claim"],
            values["wal_syncs_per_s"],
            values["wal_background_syncs_per_s"],
            values["connections"],
        )

    def wait_drained(self, supervisors: list[supervised.Supervisor], backends: Backends) -> None:
        deadline = time.monotonic() + 120.0 + self.n / 100.0
        while self.db.live_jobs() > 0:
            backends.sample()
            for supervisor in supervisors:
                if supervisor.process.poll() is not None:
                    raise RuntimeError(
                        f"workerpool run died during the drain:\n{supervisor.tail()}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fleet drain of {self.n} jobs did not finish in time")
            time.sleep(POLL_S)


def children_cpu(supervisors: list[supervised.Supervisor]) -> float:
    return sum(supervised.cpu_seconds(pid) for s in supervisors for pid in s.queue_children())


def wal_figures(idle: Wal, before: Wal, after: Wal, done: int, seconds: float) -> dict[str, float]:
    """The drain's fsyncs and WAL bytes, less the idle window's rates over the same time."""
    idle_s, drain_s = before.at - idle.at, after.at - before.at
    sync_rate = (before.syncs - idle.syncs) / idle_s
    byte_rate = (before.bytes - idle.bytes) / idle_s
    syncs = max(0.0, after.syncs - before.syncs - sync_rate * drain_s)
    return {
        "wal_syncs_per_s": syncs / seconds if seconds > 0 else 0.0,
        "wal_syncs_per_1k_jobs": syncs * 1000.0 / done,
        "wal_background_syncs_per_s": sync_rate,
        "wal_bytes_per_job": max(0.0, after.bytes - before.bytes - byte_rate * drain_s) / done,
    }


def claim_figures(transactions: list[claim_timer.Transaction], done: int) -> dict[str, float]:
    """Claim latency, rows per claim and commits per 1000 jobs from the children's lines."""
    claims = [t for t in transactions if t.rows]
    if not claims:
        raise RuntimeError("the worker children recorded no claim (is bench.claim_timer on?)")
    latencies = [t.ms for t in claims]
    return {
        "claim_p50_ms": percentile(latencies, 50),
        "claim_p99_ms": percentile(latencies, 99),
        "rows_per_claim": sum(t.rows for t in claims) / len(claims),
        "commits_per_1k_jobs": len(transactions) * 1000.0 / done,
    }


def table(report: Report, counts: tuple[int, ...]) -> str:
    """One row per supervisor count (and through PgBouncer, when measured), one column per
    figure (medians), for the docs."""
    rows = [("supervisors", *(heading for _, _, heading, _ in FIGURES))]
    for count in counts:
        for bounced in (False, True):
            if figure(count, "jobs_per_s", bounced) not in report.figures:
                continue
            cells = []
            for suffix, *_ in FIGURES:
                value = report.figures[figure(count, suffix, bounced)].value
                cells.append("-" if value is None else _cell(value))
            rows.append((f"{count}{' via PgBouncer' if bounced else ''}", *cells))
    return markdown_table(rows, numeric=range(len(rows[0])))


def _cell(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


__all__ = ["DEFAULT_COUNTS", "Fleet", "declare", "parse_counts", "table"]
