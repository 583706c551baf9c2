"""One benchmark run: what to measure (Plan), the figures (declare), and the measuring (Bench).

Repeats are interleaved: every repeat runs each throughput configuration once (the ceiling
and the lean floor, drain with one child, drain with two), so slow drift on a shared machine
spreads over all of them instead of biasing one. Ratios compare medians measured in this same
run.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workerpool import WorkerPool

from . import (
    app,
    batches,
    burst,
    capacity,
    ceiling,
    doors,
    enqueue,
    fleet,
    floors,
    history,
    joblogs,
    limits,
    once,
    operators,
    processes,
    scale,
    steps,
    supervised,
    typed,
    web,
    workflows,
)
from .app import DEFAULT_CONCURRENCY, QUEUE, make_pool, noop, stamp
from .database import BenchDatabase
from .report import Report, Target

log = logging.getLogger("workerpool.bench")

SECTIONS = (
    "ceiling",
    "drain",
    "defaults",
    "metrics",
    "pickup",
    "enqueue",
    "single",
    "doors",
    "bulk",
    "growth",
    "memory",
    "healthcheck",
    "operators",
    "web",
    "batches",
    "workflows",
    "steps",
    "once",
    "limits",
    "fleet",
    "burst",
    "processes",
    "logs",
    "history",
    "typed",
    "capacity",
)
#: Measured only when asked for: the limits comparison and the supervisor counts drain N jobs
#: four times per repeat; the kill -9 burst's windows are wall-clock seconds (tens of them per
#: repeat) and it kills processes; the steps section starts three supervisors per repeat, the
#: once section four; the workflows start four supervisors per repeat and run a chain and a
#: sequence one job at a time; the processes comparison wants every core quiet; the history
#: section loads ``--history`` rows into a second table (minutes at 100M); the capacity section
#: reads the server's processes in /proc (a server on this machine only).
ASKED_ONLY = (
    "steps",
    "once",
    "limits",
    "fleet",
    "burst",
    "workflows",
    "processes",
    "logs",
    "history",
    "typed",
    "capacity",
)
#: What a run without ``--only`` measures.
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ASKED_ONLY)
#: Older section names ``--only`` still accepts: ``scale`` was the claim against the table's
#: size, before ``--scale`` came to mean supervisor counts.
ALIASES = {"scale": "growth"}
#: What a user who never tunes gets: the library's default concurrency and prefetch (a buffer
#: sized to the handlers).
LIBRARY_DEFAULTS = {"BENCH_CONCURRENCY": "default", "BENCH_PREFETCH": "default"}
CEILING_2 = "ceiling_2proc_jobs_per_s"
TUNED = {1: "drain_1child_jobs_per_s", 2: "drain_2children_jobs_per_s"}
METRICS_OFF = "drain_metrics_off_jobs_per_s"
METRICS_OFF_CPU = "drain_metrics_off_cpu_us_per_job"
CEILING = "ceiling_jobs_per_s"
LEAN = "lean_floor_jobs_per_s"
LEAN_2 = "lean_floor_2proc_jobs_per_s"
WEB_REQUESTS = 30  # timed overview requests per repeat


@dataclass(frozen=True)
class Plan:
    """Sizes and switches of one run (``--quick`` shrinks them for the smoke test)."""

    n: int
    repeats: int
    sections: tuple[str, ...]
    claims: int  # timed claims per round (scale)
    claim_limit: int  # rows per claim (scale)
    history: int  # done rows in the large table (scale)
    backlog: int  # pending rows in the large table (scale)
    single: int  # single transactional enqueues per repeat
    pickup_jobs: int
    pickup_gap_ms: float
    finished: int = 1_000_000  # finished rows in the operators' table
    concurrency: int = DEFAULT_CONCURRENCY  # the bench queue's, in every worker child
    quick: bool = False
    fleet_counts: tuple[int, ...] = fleet.DEFAULT_COUNTS  # supervisors per fleet drain
    fleet_bouncer: bool = False  # each fleet drain also through PgBouncer
    batch_members: int = 10_000  # members of the batch drained against as many plain jobs
    step_jobs: int = 1_000  # 10-step jobs drained against ten times as many plain jobs
    kills: int = 10  # SIGKILLs of the queue child per burst
    burst_window_s: float = 5.0  # the burst's rate windows before and after
    burst_nap_ms: float = 20.0  # each burst job's sleep
    burst_concurrency: int = 10  # the burst's queue (the library's default; prefetch adaptive)
    cpu_jobs: int = 3_000  # spin jobs per drain of the processes comparison

    def wants(self, section: str) -> bool:
        return section in self.sections


def declare(report: Report, plan: Plan) -> None:
    """Every figure this run can produce, with its unit, reference and target."""
    if plan.wants("ceiling") or plan.wants("drain") or plan.wants("defaults"):
        report.declare(CEILING, "jobs/s", note="plain psycopg loop, 1 process, 100 per claim")
        report.declare(CEILING_2, "jobs/s", ratio_to=CEILING, note="the same loop in 2 processes")
        report.declare(
            LEAN,
            "jobs/s",
            ratio_to=CEILING,
            note=f"the same loop on a lean table ({ceiling.LEAN}: a queue's columns and "
            "indexes only), 1 process",
        )
        report.declare(LEAN_2, "jobs/s", ratio_to=CEILING_2, note="the lean loop in 2 processes")
    if plan.wants("drain") or plan.wants("defaults"):
        report.declare(
            TUNED[1],
            "jobs/s",
            ratio_to=CEILING,
            target=Target(">=", 0.7, on_ratio=True),
            also_to=LEAN,
            note=f"workerpool run, 1 worker child, concurrency {plan.concurrency}, "
            "prefetch 50, no-op jobs; against the 1-process loop and the lean one",
        )
        report.declare(
            TUNED[2],
            "jobs/s",
            ratio_to=CEILING_2,
            target=Target(">=", 0.7, on_ratio=True),
            also_to=LEAN_2,
            note="2 x workerpool run (1 child each) on one queue; against the 2-process loop "
            "and the lean one",
        )
    if plan.wants("defaults"):
        for children in (1, 2):
            report.declare(
                f"drain_defaults_{children}_jobs_per_s",
                "jobs/s",
                ratio_to=TUNED[children],
                target=Target(">=", 0.5, on_ratio=True),
                note=f"{children} x workerpool run with the library's defaults "
                "(pool.queue(name) untuned); against tuned",
            )
    if plan.wants("metrics"):
        report.declare(METRICS_OFF, "jobs/s", note="workerpool run, 1 worker child, no metrics")
        report.declare(
            "drain_metrics_on_jobs_per_s",
            "jobs/s",
            ratio_to=METRICS_OFF,
            target=Target(">=", 0.95, on_ratio=True),
            note="the same with --metrics-port (cost < 5 %)",
        )
        report.declare(METRICS_OFF_CPU, "us/job", note="worker child CPU per job, no metrics")
        report.declare(
            "drain_metrics_on_cpu_us_per_job",
            "us/job",
            ratio_to=METRICS_OFF_CPU,
            note="the same with --metrics-port (less noisy than wall clock)",
        )
    if plan.wants("pickup"):
        for p in (50, 90, 99):
            report.declare(
                f"pickup_raw_p{p}_ms", "ms", note="plain psycopg LISTEN, claim on notify, durable"
            )
        for mode in ("notify", "poll"):
            for p in (50, 90, 99):
                target = None
                if mode == "notify" and p in (50, 99):
                    target = Target("<=", 1.3 if p == 50 else 2.0, on_ratio=True)
                report.declare(
                    f"pickup_{mode}_p{p}_ms",
                    "ms",
                    target=target,
                    ratio_to=f"pickup_raw_p{p}_ms" if mode == "notify" else None,
                )
    if plan.wants("memory"):
        report.declare("rss_parent_peak_mb", "MiB", note="VmHWM of the supervisor after a drain")
        report.declare(
            "rss_child_peak_mb",
            "MiB",
            target=Target("<=", 60),
            note="VmHWM of a worker child after a drain",
        )
    if plan.wants("enqueue") or plan.wants("single"):
        report.declare(
            "enqueue_single_raw_per_s",
            "jobs/s",
            note="plain psycopg autocommit INSERT ... RETURNING id per job",
        )
        report.declare(
            "enqueue_single_per_s",
            "jobs/s",
            ratio_to="enqueue_single_raw_per_s",
            target=Target(">=", 0.9, on_ratio=True),
            note="enqueue() without conn=, one caller, alternating blocks with raw",
        )
        report.declare(
            "enqueue_single_bounded_per_s",
            "jobs/s",
            ratio_to="enqueue_single_per_s",
            target=Target(">=", 0.9, on_ratio=True),
            note="enqueue() without conn= into the same queue bounded (max_pending, never "
            "reached: the room check counts every waiting job), blocks rotated with the two above",
        )
        report.declare("enqueue_single_raw_cpu_us", "us/job", note="client CPU of the raw loop")
        report.declare(
            "enqueue_single_cpu_us",
            "us/job",
            ratio_to="enqueue_single_raw_cpu_us",
            note="client CPU of enqueue() without conn=",
        )
    if plan.wants("doors"):
        doors.declare(report, plan.single)
    if plan.wants("capacity"):
        capacity.declare(report, plan.n, plan.single)
    if plan.wants("enqueue") or plan.wants("bulk"):
        report.declare(
            "enqueue_bulk_raw_rows_per_s",
            "rows/s",
            note="plain psycopg INSERT ... unnest(jsonb[]), 1000 per statement",
        )
        report.declare(
            "enqueue_bulk_raw_copy_rows_per_s",
            "rows/s",
            note="plain psycopg COPY, 1000 rows per autocommit COPY",
        )
        report.declare(
            "enqueue_bulk_rows_per_s",
            "rows/s",
            ratio_to="enqueue_bulk_raw_copy_rows_per_s",
            target=Target(">=", 0.9, on_ratio=True),
            note="enqueue_many, 1000 jobs without keys per call (COPY), "
            "interleaved with the raw loops",
        )
        report.declare(
            "enqueue_bulk_keyed_rows_per_s",
            "rows/s",
            ratio_to="enqueue_bulk_raw_copy_rows_per_s",
            note="enqueue_many, 1000 jobs with a new key each per call (INSERT)",
        )
    if plan.wants("enqueue"):
        report.declare(
            "enqueue_single_raw_tx_per_s",
            "jobs/s",
            note="plain psycopg BEGIN; INSERT; COMMIT per job",
        )
        report.declare(
            "enqueue_single_tx_per_s",
            "jobs/s",
            ratio_to="enqueue_single_raw_tx_per_s",
            target=Target(">=", 3_000),
            note="enqueue(conn=...) in the caller's transaction, one job per commit",
        )
        callers = enqueue.CALLERS
        report.declare(
            "enqueue_single_raw_tx_procs_per_s",
            "jobs/s",
            note=f"the raw single loop in {callers} processes at once",
        )
        report.declare(
            "enqueue_single_tx_procs_per_s",
            "jobs/s",
            ratio_to="enqueue_single_raw_tx_procs_per_s",
            note=f"the enqueue(conn=...) loop in {callers} processes at once",
        )
    if plan.wants("limits"):
        limits.declare(report)
    if plan.wants("operators"):
        for name, note in operators.FIGURES:
            report.declare(
                name,
                "ms",
                target=Target("<=", 100),
                note=f"{note}, {plan.finished:,} finished rows",
            )
    if plan.wants("healthcheck"):
        report.declare(
            "healthcheck_ms",
            "ms",
            target=Target("<=", 50),
            note="python -m workerpool healthcheck, start to exit",
        )
    if plan.wants("growth"):
        scale.declare(report)
    if plan.wants("fleet"):
        fleet.declare(report, plan.fleet_counts, bouncer=plan.fleet_bouncer)
    if plan.wants("batches"):
        batches.declare(report, plan.batch_members)
    if plan.wants("workflows"):
        workflows.declare(report, plan.batch_members)
    if plan.wants("steps"):
        steps.declare(report, plan.step_jobs)
    if plan.wants("once"):
        once.declare(report, plan.step_jobs * 10)
    if plan.wants("logs"):
        joblogs.declare(report, plan.step_jobs * 10)
    if plan.wants("typed"):
        typed.declare(report, plan.step_jobs * 10, plan.single)
    if plan.wants("burst"):
        burst.declare(
            report,
            kills=plan.kills,
            window_s=plan.burst_window_s,
            nap_ms=plan.burst_nap_ms,
            concurrency=plan.burst_concurrency,
        )
    if plan.wants("processes"):
        processes.declare(report, plan.cpu_jobs)
        processes.declare_shapes(report, plan.cpu_jobs)
    if plan.wants("history"):
        history.declare(report, plan.history)
    if plan.wants("web"):
        report.declare(
            "web_overview_p50_ms",
            "ms",
            target=Target("<=", 100),
            note="GET / of the dashboard, history done + backlog pending rows",
        )
        report.declare("web_overview_p99_ms", "ms")


class Bench:
    """Measures into ``report`` on the private database ``bench_db``."""

    def __init__(self, plan: Plan, bench_db: BenchDatabase, report: Report) -> None:
        self.plan = plan
        self.db = bench_db
        self.report = report
        self.pool: WorkerPool = make_pool(bench_db.url, concurrency=plan.concurrency)
        self.quiet_pool: WorkerPool = make_pool(
            bench_db.url, notify=False, concurrency=plan.concurrency
        )
        self._metrics_runs = 0  # alternates which of metrics off/on drains first
        self._defaults: supervised.Launcher | None = None  # the library defaults' supervisors
        self._burst: supervised.Launcher | None = None  # the kill -9 burst's supervisors
        self._cpu: supervised.Launcher | None = None  # the processes comparison's supervisors
        self._spin_iters = 0  # rounds of pure Python per spin job (calibrated once)
        self._capacity: capacity.Capacity | None = None  # the server CPU per job phases

    def close(self) -> None:
        self.pool.dispose()
        self.quiet_pool.dispose()

    def run(self) -> None:
        with tempfile.TemporaryDirectory(prefix="wp-bench-") as workdir:
            self.launcher = supervised.Launcher(self.db, Path(workdir), self.plan.concurrency)
            for repeat in range(self.plan.repeats):
                log.info("repeat %d/%d", repeat + 1, self.plan.repeats)
                self.run_once()
                if self.plan.wants("batches"):
                    batches.measure(
                        self.report, self.launcher, self.pool, self.plan.batch_members, repeat
                    )
                if self.plan.wants("workflows"):
                    workflows.measure(
                        self.report, self.launcher, self.pool, self.plan.batch_members, repeat
                    )
                if self.plan.wants("steps"):
                    steps.measure(
                        self.report, self.launcher, self.pool, self.plan.step_jobs, repeat
                    )
                if self.plan.wants("once"):
                    once.measure(
                        self.report, self.launcher, self.pool, self.plan.step_jobs * 10, repeat
                    )
                if self.plan.wants("processes"):
                    self.measure_processes(repeat)
                if self.plan.wants("logs"):
                    joblogs.measure(
                        self.report, self.launcher, self.pool, self.plan.step_jobs * 10, repeat
                    )
                if self.plan.wants("capacity"):
                    self.measure_capacity()
                if self.plan.wants("typed"):
                    typed.measure(
                        self.report,
                        self.launcher,
                        self.pool,
                        self.plan.step_jobs * 10,
                        self.plan.single,
                        repeat,
                    )
            if self.plan.wants("limits"):  # interleaves its own repeats
                self.measure_limits()
            if self.plan.wants("fleet"):  # the same
                self.measure_fleet()
        if self.plan.wants("growth"):
            self.measure_growth()
        if self.plan.wants("operators"):
            self.measure_operators()
        if self.plan.wants("web"):
            self.measure_web()
        if self.plan.wants("history"):
            history.HistoryBench(
                self.db, self.pool, self.report, claims=self.plan.claims, repeats=self.plan.repeats
            ).run(self.plan.history)

    def run_once(self) -> None:
        plan = self.plan
        if plan.wants("ceiling") or plan.wants("drain") or plan.wants("defaults"):
            self.measure_ceiling(processes=1, figure=CEILING)
            self.measure_lean(processes=1, figure=LEAN)
            self.measure_ceiling(processes=2, figure=CEILING_2)
            self.measure_lean(processes=2, figure=LEAN_2)
        if plan.wants("drain") or plan.wants("memory") or plan.wants("defaults"):
            self.measure_drains()
        if plan.wants("defaults"):
            self.measure_default_drains()
        if plan.wants("metrics"):
            self.measure_metrics_cost()
        if plan.wants("pickup"):
            self.measure_raw_pickup()
            self.measure_pickup(notify=True)
            self.measure_pickup(notify=False)
        if plan.wants("enqueue") or plan.wants("single"):
            self.measure_single()
        if plan.wants("doors"):
            self.db.reset()
            doors.measure(self.report, self.pool, self.db.dsn, plan.single)
        if plan.wants("healthcheck"):
            for value in floors.healthcheck_ms():
                self.report.add("healthcheck_ms", value)
        if plan.wants("enqueue") or plan.wants("bulk"):
            self.measure_bulk()
        if plan.wants("enqueue"):
            self.measure_enqueue()
        if plan.wants("burst"):
            self.measure_burst()

    # -- (2) drain and (6) memory ----------------------------------------------------------------

    def measure_drains(self) -> None:
        results = []
        for children, figure in ((1, "drain_1child_jobs_per_s"), (2, "drain_2children_jobs_per_s")):
            result = supervised.drain(
                self.launcher, self.pool, self.plan.n, children, enqueue.load_for_drain
            )
            results.append(result)
            log.info(
                "%s: %.0f jobs/s (peak RSS parent %.1f MiB, child %.1f MiB)",
                figure,
                result.jobs_per_s,
                result.parent_peak_mb,
                result.child_peak_mb,
            )
            if self.plan.wants("drain") or self.plan.wants("defaults"):
                self.report.add(figure, result.jobs_per_s)
        if self.plan.wants("memory"):
            self.report.add("rss_parent_peak_mb", max(r.parent_peak_mb for r in results))
            self.report.add("rss_child_peak_mb", max(r.child_peak_mb for r in results))

    def measure_processes(self, repeat: int) -> None:
        """The CPU-bound drain with processes=1 and 2 (``bench.processes``)."""
        if self._cpu is None:
            workdir = self.launcher.workdir / "processes"
            workdir.mkdir()
            self._cpu = supervised.Launcher(self.db, workdir, processes.CHILDREN_CONCURRENCY)
            self._spin_iters = processes.calibrate()
        self.report.add(processes.SPIN, processes.SPIN_MS)
        processes.measure(
            self.report, self._cpu, self.pool, self.plan.cpu_jobs, repeat, self._spin_iters
        )
        processes.measure_shapes(
            self.report, self._cpu, self.pool, self.plan.cpu_jobs, repeat, self._spin_iters
        )

    def measure_default_drains(self) -> None:
        """The same drains with the library's defaults (what a user who never tunes gets)."""
        if self._defaults is None:
            workdir = self.launcher.workdir / "defaults"
            workdir.mkdir()
            self._defaults = supervised.Launcher(self.db, workdir, 10, extra_env=LIBRARY_DEFAULTS)
        launcher = self._defaults
        for children in (1, 2):
            result = supervised.drain(
                launcher, self.pool, self.plan.n, children, enqueue.load_for_drain
            )
            self.report.add(f"drain_defaults_{children}_jobs_per_s", result.jobs_per_s)
            log.info(
                "drain with the defaults, %d child(ren): %.0f jobs/s", children, result.jobs_per_s
            )

    def measure_raw_pickup(self) -> None:
        self.db.reset()
        latencies = floors.raw_pickup_ms(
            self.db.dsn,
            QUEUE,
            stamp.__name__,
            self.plan.pickup_jobs,
            self.plan.pickup_gap_ms / 1000.0,
        )
        p50, p90, p99 = supervised.p50_p90_p99(latencies)
        for p, value in ((50, p50), (90, p90), (99, p99)):
            self.report.add(f"pickup_raw_p{p}_ms", value)
        log.info("pickup (raw): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", p50, p90, p99)

    def measure_metrics_cost(self) -> None:
        """The drain with metrics off and on, back to back; the order alternates by repeat."""
        self._metrics_runs += 1
        order = [False, True] if self._metrics_runs % 2 else [True, False]
        for metrics in order:
            figure = "drain_metrics_on_jobs_per_s" if metrics else METRICS_OFF
            result = supervised.drain(
                self.launcher, self.pool, self.plan.n, 1, enqueue.load_for_drain, metrics=metrics
            )
            cpu_us = result.child_cpu_s * 1e6 / self.plan.n
            log.info("%s: %.0f jobs/s, %.0f us CPU per job", figure, result.jobs_per_s, cpu_us)
            self.report.add(figure, result.jobs_per_s)
            self.report.add(figure.replace("jobs_per_s", "cpu_us_per_job"), cpu_us)

    # -- (3) pickup latency ----------------------------------------------------------------------

    def measure_pickup(self, *, notify: bool) -> None:
        mode = "notify" if notify else "poll"
        enqueuer = self.pool if notify else self.quiet_pool
        latencies = supervised.pickup_latencies_ms(
            self.launcher,
            enqueuer,
            self.plan.pickup_jobs,
            self.plan.pickup_gap_ms / 1000.0,
            notify=notify,
        )
        p50, p90, p99 = supervised.p50_p90_p99(latencies)
        for p, value in ((50, p50), (90, p90), (99, p99)):
            self.report.add(f"pickup_{mode}_p{p}_ms", value)
        log.info("pickup (%s): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", mode, p50, p90, p99)

    # -- (1) ceiling ---------------------------------------------------------------------------

    def measure_ceiling(self, *, processes: int, figure: str) -> None:
        self.load_drain_jobs()
        ceiling.run(self.db.dsn, QUEUE, processes)
        self.record_drain(figure)

    def measure_lean(self, *, processes: int, figure: str) -> None:
        """The ceiling's loop on the lean table, loaded with the same N no-op jobs."""
        lean = ceiling.LEAN
        self.db.sql(ceiling.lean_table())
        self.db.sql(f"TRUNCATE {lean}")
        self.db.sql(ceiling.LEAN_LOAD, (QUEUE, noop.__name__, self.plan.n))
        self.db.sql(f"VACUUM ANALYZE {lean}")
        ceiling.run(self.db.dsn, QUEUE, processes, floor="lean")
        done, seconds = self.db.sql(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
            f" FROM {lean} WHERE state = 'done'"
        )[0]
        self.record_rate(figure, done, seconds or 0.0)

    def load_drain_jobs(self) -> None:
        self.db.reset()
        enqueue.load_for_drain(self.pool, self.plan.n)
        self.db.vacuum()

    def record_drain(self, figure: str) -> None:
        done, seconds = self.db.drain_window()
        self.record_rate(figure, done, seconds)

    def record_rate(self, figure: str, done: int, seconds: float) -> None:
        if done != self.plan.n:
            raise RuntimeError(f"{figure}: {done} of {self.plan.n} jobs done after the drain")
        rate = done / seconds if seconds > 0 else float("inf")
        self.report.add(figure, rate)
        log.info("%s: %.0f jobs/s (%d jobs in %.3f s)", figure, rate, done, seconds)

    # -- (4) enqueue ---------------------------------------------------------------------------

    def measure_bulk(self) -> None:
        """``enqueue_many`` with and without keys, interleaved with the raw COPY and INSERT."""
        self.db.reset()
        enqueue.warm_up(self.pool)
        bulk = enqueue.bulk_comparison(self.pool, self.db.dsn, self.plan.n)
        for figure, key in (
            ("enqueue_bulk_raw_rows_per_s", "raw_unnest"),
            ("enqueue_bulk_raw_copy_rows_per_s", "raw_copy"),
            ("enqueue_bulk_rows_per_s", "pool"),
            ("enqueue_bulk_keyed_rows_per_s", "pool_keyed"),
        ):
            self.report.add(figure, bulk[key])
        log.info(
            "bulk: %.0f rows/s (keyed %.0f) against COPY %.0f",
            bulk["pool"],
            bulk["pool_keyed"],
            bulk["raw_copy"],
        )

    def measure_enqueue(self) -> None:
        single = self.plan.single
        self.db.reset()
        self.measure(
            "enqueue_single_raw_tx_per_s", enqueue.raw_single_per_second, self.db.dsn, single
        )
        self.db.reset()
        enqueue.warm_up(self.pool)
        self.measure("enqueue_single_tx_per_s", enqueue.single_per_second, self.pool, single)
        self.db.reset()
        self.measure(
            "enqueue_single_raw_tx_procs_per_s",
            enqueue.concurrent_per_second,
            enqueue.raw_single_caller,
            self.db.dsn,
            single,
        )
        self.db.reset()
        self.measure(
            "enqueue_single_tx_procs_per_s",
            enqueue.concurrent_per_second,
            enqueue.single_caller,
            self.db.url,
            single,
        )

    def measure_single(self) -> None:
        """``enqueue()`` without ``conn=``, its raw floor and the same enqueue into a bounded
        queue, in blocks one after the other."""
        self.db.reset()
        bounded = make_pool(
            self.db.url,
            concurrency=self.plan.concurrency,
            max_pending=enqueue.BOUNDED_MAX_PENDING,
        )
        try:
            enqueue.warm_up(self.pool)
            enqueue.warm_up(bounded)
            pair = enqueue.single_pair(self.pool, self.db.dsn, self.plan.single, bounded)
        finally:
            bounded.dispose()
        for figure, key in (
            ("enqueue_single_raw_per_s", "raw_per_s"),
            ("enqueue_single_per_s", "pool_per_s"),
            ("enqueue_single_bounded_per_s", "bounded_per_s"),
            ("enqueue_single_raw_cpu_us", "raw_cpu_us"),
            ("enqueue_single_cpu_us", "pool_cpu_us"),
        ):
            self.report.add(figure, pair[key])
        log.info(
            "single enqueue: %.0f/s (bounded queue %.0f/s) against raw %.0f/s"
            " (client CPU %.0f us against %.0f)",
            pair["pool_per_s"],
            pair["bounded_per_s"],
            pair["raw_per_s"],
            pair["pool_cpu_us"],
            pair["raw_cpu_us"],
        )

    def measure_capacity(self) -> None:
        """The server's CPU per job of each phase (``bench.capacity``), one repeat."""
        if self._capacity is None:
            self._capacity = capacity.Capacity(
                self.db,
                self.pool,
                self.report,
                self.launcher,
                jobs=self.plan.n,
                single=self.plan.single,
            )
        self._capacity.measure()

    def measure(self, figure: str, how, *args) -> None:
        value = how(*args)
        self.report.add(figure, value)
        log.info("%s: %.0f", figure, value)

    # -- (12) the kill -9 burst ---------------------------------------------------------------

    def measure_burst(self) -> None:
        """The burst's queue: ``burst_concurrency`` and the library's adaptive prefetch, so the
        jobs a kill makes suspects are what an untuned queue holds (each costs a run alone)."""
        if self._burst is None:
            workdir = self.launcher.workdir / "burst"
            workdir.mkdir()
            self._burst = supervised.Launcher(
                self.db,
                workdir,
                self.plan.burst_concurrency,
                extra_env={app.PREFETCH_ENV: app.LIBRARY_DEFAULT},
            )
        burst.Burst(
            self._burst,
            self.report,
            kills=self.plan.kills,
            window_s=self.plan.burst_window_s,
            nap_ms=self.plan.burst_nap_ms,
        ).run()

    # -- (7) limits --------------------------------------------------------------------------

    def measure_limits(self) -> None:
        plan = self.plan
        bench = limits.LimitsBench(
            self.db,
            self.report,
            n=plan.backlog if not plan.quick else plan.n,
            repeats=plan.repeats,
            claims=plan.claims,
        )
        try:
            bench.run(self.launcher)
        finally:
            bench.close()

    # -- (8) supervisors on one database ------------------------------------------------------

    def measure_fleet(self) -> None:
        workdir = self.launcher.workdir / "fleet"
        workdir.mkdir()
        fleet.Fleet(
            self.db,
            self.pool,
            self.report,
            workdir,
            counts=self.plan.fleet_counts,
            n=self.plan.n,
            repeats=self.plan.repeats,
            concurrency=self.plan.concurrency,
            bouncer=self.plan.fleet_bouncer,
        ).run()

    # -- (5) growth: the claim against the table's size -----------------------------------------

    def measure_growth(self) -> None:
        plan = self.plan
        scale.Growth(
            self.db,
            self.pool,
            self.report,
            claims=plan.claims,
            limit=plan.claim_limit,
            repeats=plan.repeats,
        ).run(history=plan.history, backlog=plan.backlog)

    def measure_web(self) -> None:
        """The overview over ``history`` done rows (all finished just now: the throughput
        chart's window holds every one, its worst case) and ``backlog`` pending rows."""
        self.db.reset()
        self.db.load_finished(QUEUE, noop.__name__, self.plan.history)
        self.db.load_pending(QUEUE, noop.__name__, self.plan.backlog)
        self.db.vacuum()
        for _ in range(self.plan.repeats):
            p50, p99 = scale.p50_p99(web.overview_latencies_ms(self.pool, WEB_REQUESTS))
            self.report.add("web_overview_p50_ms", p50)
            self.report.add("web_overview_p99_ms", p99)
            log.info("dashboard overview: p50 %.1f ms, p99 %.1f ms", p50, p99)

    # -- (7) operator paths at scale -----------------------------------------------------------

    def measure_operators(self) -> None:
        operators.load(self.db, self.plan.finished)
        for name, samples in operators.timings_ms(self.pool, max(5, self.plan.repeats)).items():
            for value in samples:
                self.report.add(name, value)
            log.info(
                "%s: median %.1f ms, max %.1f ms",
                name,
                sorted(samples)[len(samples) // 2],
                max(samples),
            )
