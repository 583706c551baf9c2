"""``python -m bench --soak MIN --rate R``: sustained load on one supervisor, sampled as it runs.

The scenario: one ``workerpool run bench.app:pool`` (one queue, ``concurrency`` 20, no-op
handlers, the library's default of no prefetch), on a fresh migrated table analyzed while empty.
A producer thread calls ``enqueue_many`` with ``batch`` jobs every ``batch / rate`` seconds.
Every ``interval`` seconds one line: jobs done per second, backlog, the claim's p50/p99, pickup
p99, the worker child's RSS, table and index size, dead rows, and how old the transaction that
holds back the xmin horizon is. The same rows go to a CSV, and a PNG chart when matplotlib is
installed; beside them each index's size and packed estimate at every sample
(``<label>-indexes.csv``) and the supervisor's log at INFO without the history mover's per-pass
lines (``<label>.log``: the maintenance child's VACUUM, ANALYZE and REINDEX, with their times),
and what the server waited on around every probe claim slower than 100 ms
(``<label>-stalls.csv``, :mod:`.stalls`), with the checkpoints and autovacuum runs per sample,
and the server's CPU per role at every sample (``<label>-cpu.csv``, :mod:`.cpu_roles`: which
backend's cost per job grew).

Claim latency comes from a probe: every ``PROBE_EVERY`` seconds a claim of ``PROBE_LIMIT`` rows
through a worker's own session (its startup options, its prepared statements and the plans they
cache, its connection renewed as a worker's is), timed around the statement and then completed
like any job. Pickup is ``claimed_at - run_at`` of the jobs finished in the interval (database
clock).
"""

from __future__ import annotations

import csv
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL

from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.specs import MaintenanceSpec
from workerpool.runtime.maintenance import health
from workerpool.runtime.worker.session import Session
from workerpool.sql import table_health

from . import app, supervised
from .cpu_roles import RoleCPU
from .database import BenchDatabase, every_job
from .report import percentile
from .stalls import StallWatch, counters

log = logging.getLogger("workerpool.bench")

PROBE_EVERY = 0.5  # seconds between probe claims
PROBE_LIMIT = 20  # rows per probe claim: what a worker with 20 free slots asks for
FIRST_MINUTE = 60.0
#: done/s "tracks the offered rate" when the last minute's mean is within this share of it
TRACKING = 0.9
RSS_TARGET_MB = 60  # what a worker child must stay under
RSS_GROWTH = 1.1  # a child's memory once warm: flat, not climbing with the jobs it ran
#: After a backlog spike drains, the claim's p50 must be back within this factor of its
#: pre-spike median within RECOVERY_MINUTES (no manual VACUUM or REINDEX in between).
RECOVERY = 1.2
RECOVERY_MINUTES = 5.0
BLOCKS_READ = "SELECT blks_read FROM pg_stat_database WHERE datname = current_database()"


@dataclass(frozen=True)
class SoakPlan:
    minutes: float
    rate: float  # jobs offered per second
    batch: int = 100  # jobs per enqueue_many call
    concurrency: int = 20
    interval: float = 30.0  # seconds between samples
    retention: float = 120.0  # seconds finished rows are kept (the maintenance child prunes)
    out: Path = Path(".")
    label: str = "soak"
    #: A backlog spike: from ``spike_at`` minutes, for ``spike_minutes``, ``spike_rate`` jobs/s
    #: are offered instead of ``rate`` (None: no spike).
    spike_at: float | None = None
    spike_minutes: float = 0.0
    spike_rate: float = 0.0

    def rate_at(self, seconds: float) -> float:
        """The offered rate ``seconds`` into the run."""
        if self.spike_at is None:
            return self.rate
        start = self.spike_at * 60.0
        spiking = start <= seconds < start + self.spike_minutes * 60.0
        return self.spike_rate if spiking else self.rate


@dataclass
class Sample:
    t: float
    enqueued: int
    done: int
    done_per_s: float
    backlog: int
    claim_p50_ms: float | None
    claim_p99_ms: float | None
    pickup_p99_ms: float | None
    child_rss_mb: float | None
    table_mb: float
    index_mb: float
    dead: int
    horizon_age_s: float | None
    checkpoints: int  # since the server's statistics were reset
    autovacuums: int  # autovacuum and autoanalyze runs of the jobs table, likewise
    #: blocks the database read from outside shared_buffers per second since the last sample
    blocks_read_per_s: float | None = None

    def line(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        return (
            f"t={self.t:5.0f}s done/s={self.done_per_s:7.0f} backlog={self.backlog:7d}"
            f" claim p50/p99={ms(self.claim_p50_ms)}/{ms(self.claim_p99_ms)} ms"
            f" pickup p99={ms(self.pickup_p99_ms)} ms rss={ms(self.child_rss_mb)} MiB"
            f" table={self.table_mb:.1f} MiB indexes={self.index_mb:.1f} MiB"
            f" dead={self.dead} horizon={ms(self.horizon_age_s)} s"
            f" checkpoints={self.checkpoints} autovacuums={self.autovacuums}"
            f" read/s={ms(self.blocks_read_per_s)}"
        )


@dataclass
class Producer:
    """``enqueue_many`` of ``batch`` jobs on a fixed schedule, from a thread."""

    pool: WorkerPool
    plan: SoakPlan
    enqueued: int = 0
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        first = time.monotonic()
        due = 0.0  # seconds after `first` of the next call
        while not self._stop.is_set():
            # the schedule, not the previous call, sets each slot: a slow call is caught up
            self._stop.wait(max(0.0, first + due - time.monotonic()))
            if self._stop.is_set():
                return
            due += self.batch / self.plan.rate_at(due)
            items = [(app.noop.__name__, {"i": self.enqueued + i}) for i in range(self.batch)]
            try:
                self.pool.enqueue_many(items)
                self.enqueued += self.batch
            except Exception:  # counted and shown: the soak measures the queue, not the producer
                self.errors += 1

    @property
    def batch(self) -> int:
        return self.plan.batch

    def stop(self) -> None:
        self._stop.set()


class Probe:
    """Timed claims through a worker's own session (see the module docstring)."""

    def __init__(self, url: URL, pool: WorkerPool) -> None:
        self.session = Session(url, app.QUEUE, concurrency=1)
        self.session.open()
        self.versions = pool.registry.task_versions(app.QUEUE)
        self.samples: list[tuple[float, float]] = []  # (monotonic time, ms)

    def claim_once(self) -> float:
        """One timed claim (its rows then completed); returns its milliseconds."""
        with self.session.single_statement() as conn:
            started = time.perf_counter()
            rows = queries.claim(
                conn,
                queue=app.QUEUE,
                worker="bench:probe",
                limit=PROBE_LIMIT,
                task_versions=self.versions,
            )
            ms = (time.perf_counter() - started) * 1000.0
        self.samples.append((time.monotonic(), ms))
        with self.session.single_statement() as conn:
            queries.complete(conn, "bench:probe", [(row.id, row.attempts) for row in rows])
        return ms

    def window(self, since: float, until: float) -> list[float]:
        return [ms for at, ms in self.samples if since <= at < until]

    def close(self) -> None:
        self.session.close()


def pickup_p99_ms(bench_db: BenchDatabase, seconds: float) -> float | None:
    """Pickup p99 of the jobs finished in the last ``seconds``. Under the mover's delay they
    are all still in the jobs table (its finished index): the history has no index on
    ``finished_at``, so reading it too was a parallel scan of every job the run had finished, at
    every sample (1,200-2,000 blocks read a second after a spike of a million jobs)."""
    where = (
        "state = 'done' AND finished_at > now() - make_interval(secs => %(seconds)s)"
        " AND claimed_by <> 'bench:probe'"
    )
    source = (
        f"(SELECT claimed_at, run_at FROM workerpool_jobs WHERE {where}) AS j"
        if seconds < MaintenanceSpec.history_delay
        else every_job("claimed_at, run_at", where)
    )
    row = bench_db.sql(
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM"
        " claimed_at - run_at)) * 1000 FROM " + source,
        {"seconds": seconds},
    )
    return float(row[0][0]) if row and row[0][0] is not None else None


class Soak:
    """One soak run on ``bench_db``: start, sample until the time is up, stop, summarise."""

    def __init__(self, plan: SoakPlan, bench_db: BenchDatabase) -> None:
        self.plan = plan
        self.db = bench_db
        self.pool = app.make_pool(bench_db.url, concurrency=plan.concurrency)
        self.samples: list[Sample] = []
        #: (t, index, bytes, packed bytes) of every index of the jobs table at every sample
        self.indexes: list[tuple[float, str, int, int]] = []
        self.log_lines: list[str] = []  # the supervisor's log (INFO: the maintenance's commands)
        self.watch = StallWatch(bench_db.dsn)
        self.cpu = RoleCPU(bench_db.sql)
        self.blocks_read = 0
        #: (t, role, CPU seconds per second, µs per job done) at every sample
        self.cpu_rows: list[tuple[float, str, float, float | None]] = []

    def run(self) -> list[Sample]:
        self.db.vacuum()  # statistics of an empty table, as right after `workerpool migrate`
        with (
            tempfile.TemporaryDirectory(prefix="wp-soak-") as workdir,
            self._running(Path(workdir)) as supervisor,
        ):
            self._loop(supervisor)
        return self.samples

    @contextmanager
    def _running(self, workdir: Path) -> Iterator[supervised.Supervisor]:
        env = {app.PREFETCH_ENV: "0", app.RETENTION_ENV: str(self.plan.retention)}
        launcher = supervised.Launcher(self.db, workdir, self.plan.concurrency, extra_env=env)
        with launcher.running(1, log_level="INFO") as supervisors:
            try:
                yield supervisors[0]
            finally:
                self.log_lines = supervisors[0].log_path.read_text(errors="replace").splitlines()

    def _loop(self, supervisor: supervised.Supervisor) -> None:
        plan = self.plan
        producer = Producer(self.pool, plan)
        probe = Probe(self.db.url, self.pool)
        thread = threading.Thread(target=producer.run, name="producer", daemon=True)
        start = time.monotonic()
        thread.start()
        self.watch.start()
        self.cpu.sample(0.0)
        self.blocks_read = self.db.sql(BLOCKS_READ)[0][0]
        next_sample, last_done, last_t = start + plan.interval, 0, 0.0
        try:
            while time.monotonic() < start + plan.minutes * 60.0:
                if supervisor.process.poll() is not None:
                    raise RuntimeError(f"workerpool run exited:\n{supervisor.tail()}")
                self.watch.probed(probe.claim_once())
                now = time.monotonic()
                if now >= next_sample:
                    sample = self._sample(
                        now - start, producer, probe, supervisor, last_done, last_t, now
                    )
                    last_done, last_t = sample.done, sample.t
                    self.samples.append(sample)
                    print(f"{plan.label} {sample.line()}", flush=True)
                    next_sample += plan.interval
                time.sleep(PROBE_EVERY)  # the probe's pacing, not a wait for a condition
        finally:
            producer.stop()
            self.watch.stop()
            thread.join(10)
            probe.close()
        if producer.errors:
            log.warning("%d enqueue_many calls failed", producer.errors)

    def _sample(
        self,
        t: float,
        producer: Producer,
        probe: Probe,
        supervisor: supervised.Supervisor,
        last_done: int,
        last_t: float,
        now: float,
    ) -> Sample:
        enqueued = producer.enqueued
        backlog = self.db.live_jobs()
        done = enqueued - backlog
        claims = probe.window(now - self.plan.interval, now)
        with self.pool.engine.connect() as conn:
            table = health.read(conn)
            self.indexes.extend(
                (round(t, 1), index.name, index.bytes, index.packed_bytes)
                for index in table_health.index_sizes(conn)
            )
        children = supervisor.queue_children()
        checkpoints, autovacuums = counters(self.db.sql)
        done_per_s = (done - last_done) / (t - last_t) if t > last_t else 0.0
        blocks_read = self.db.sql(BLOCKS_READ)[0][0]
        blocks_read_per_s = (blocks_read - self.blocks_read) / (t - last_t) if t > last_t else None
        self.blocks_read = blocks_read
        self.cpu_rows.extend(
            (
                round(t, 1),
                role,
                round(used, 4),
                round(used / done_per_s * 1e6, 1) if done_per_s else None,
            )
            for role, used in self.cpu.sample(t - last_t).items()
        )
        return Sample(
            t=round(t, 1),
            enqueued=enqueued,
            done=done,
            done_per_s=done_per_s,
            backlog=backlog,
            claim_p50_ms=percentile(claims, 50) if claims else None,
            claim_p99_ms=percentile(claims, 99) if claims else None,
            pickup_p99_ms=pickup_p99_ms(self.db, self.plan.interval),
            child_rss_mb=supervised.rss_mb(children[0]) if children else None,
            table_mb=table.table_bytes / 2**20,
            index_mb=table.index_bytes / 2**20,
            dead=table.dead,
            horizon_age_s=max(0.0, table.holder.age_s or 0.0) if table.holder else None,
            checkpoints=checkpoints,
            autovacuums=autovacuums,
            blocks_read_per_s=blocks_read_per_s,
        )

    def close(self) -> None:
        self.pool.dispose()


def verdict(plan: SoakPlan, samples: list[Sample]) -> list[str]:
    """The issue's targets, each as one line: met or not, with its figures."""
    if len(samples) < 2:
        return ["too few samples for a verdict"]
    last_minute = [s.done_per_s for s in samples if s.t > samples[-1].t - FIRST_MINUTE]
    tracking = statistics.mean(last_minute)
    # the first minute's samples: at least the first one (taken at t = interval + a little)
    first_end = max(FIRST_MINUTE, samples[0].t)
    first = [s.claim_p99_ms for s in samples if s.t <= first_end and s.claim_p99_ms]
    later = [s.claim_p99_ms for s in samples if s.t > first_end and s.claim_p99_ms]
    lines = [
        f"done/s over the last minute {tracking:.0f} of {plan.rate:.0f} offered:"
        f" {'met' if tracking >= TRACKING * plan.rate else 'MISSED'}"
    ]
    if first and later:
        base, worst = max(first), max(later)
        lines.append(
            f"claim p99 worst {worst:.1f} ms against {base:.1f} ms in the first minute:"
            f" {'met' if worst <= 2 * base else 'MISSED'} (target <= 2x)"
        )
    settled = [s.table_mb for s in _outside_spike(plan, samples) if s.t >= 2 * plan.retention]
    if settled:
        lines.append(
            f"table size after two retention windows {min(settled):.1f}..."
            f"{max(settled):.1f} MiB: "
            f"{'met' if max(settled) <= 1.5 * min(settled) else 'MISSED'}"
            " (target: bounded, max <= 1.5x min; a spike's backlog aside)"
        )
    rss = [s.child_rss_mb for s in samples if s.t >= 2 * plan.retention and s.child_rss_mb]
    if rss:
        flat = max(rss) <= RSS_GROWTH * min(rss) and max(rss) <= RSS_TARGET_MB
        lines.append(
            f"worker child RSS after two retention windows {min(rss):.1f}..."
            f"{max(rss):.1f} MiB: {'met' if flat else 'MISSED'} (target: <="
            f" {RSS_TARGET_MB} MiB, max <= {RSS_GROWTH}x min)"
        )
    if plan.spike_at is not None:
        lines.extend(spike_verdict(plan, samples))
    return lines


def _spike_drain(plan: SoakPlan, samples: list[Sample]) -> tuple[float, int, Sample | None]:
    """A spike's start (seconds), the largest backlog before it, and the first sample after
    it with the backlog back down to that (None: it never drained)."""
    assert plan.spike_at is not None
    start, end = plan.spike_at * 60.0, (plan.spike_at + plan.spike_minutes) * 60.0
    calm = max((s.backlog for s in samples if s.t <= start), default=0)
    return start, calm, next((s for s in samples if s.t >= end and s.backlog <= calm), None)


def _outside_spike(plan: SoakPlan, samples: list[Sample]) -> list[Sample]:
    """The samples before a spike and after its backlog drained (all of them without one)."""
    if plan.spike_at is None:
        return samples
    start, _, drained = _spike_drain(plan, samples)
    after = float("inf") if drained is None else drained.t
    return [s for s in samples if s.t < start or s.t >= after]


def spike_verdict(plan: SoakPlan, samples: list[Sample]) -> list[str]:
    """After the spike's backlog drained: the claim's p50 back within RECOVERY x its pre-spike
    median within RECOVERY_MINUTES, and staying there to the end of the run."""
    start, calm, drained = _spike_drain(plan, samples)
    end = start + plan.spike_minutes * 60.0
    before = [s for s in samples if s.t <= start]
    base_p50 = (
        statistics.median(s.claim_p50_ms for s in before if s.claim_p50_ms)
        if any(s.claim_p50_ms for s in before)
        else None
    )
    if base_p50 is None:
        return ["spike: no claim sample before the spike"]
    if drained is None:
        return [f"spike: the backlog never drained back to {calm} jobs: MISSED"]
    limit = RECOVERY * base_p50
    back = next(
        (
            s
            for s in samples
            if s.t >= drained.t and s.claim_p50_ms is not None and s.claim_p50_ms <= limit
        ),
        None,
    )
    settled = [
        s.claim_p50_ms
        for s in samples
        if s.t >= drained.t + RECOVERY_MINUTES * 60.0 and s.claim_p50_ms
    ]
    lines = [
        f"spike: peak backlog {max(s.backlog for s in samples)} jobs, drained at"
        f" t={drained.t:.0f} s ({(drained.t - end) / 60:.1f} min after the spike ended)"
    ]
    if back is None:
        lines.append(f"claim p50 never back within {RECOVERY}x of {base_p50:.2f} ms: MISSED")
        return lines
    minutes = (back.t - drained.t) / 60.0
    lines.append(
        f"claim p50 back to {back.claim_p50_ms:.2f} ms (pre-spike {base_p50:.2f} ms)"
        f" {minutes:.1f} min after the drain: "
        f"{'met' if minutes <= RECOVERY_MINUTES else 'MISSED'}"
        f" (target <= {RECOVERY}x within {RECOVERY_MINUTES:g} min)"
    )
    if settled:
        median = statistics.median(settled)
        lines.append(
            f"claim p50 median from {RECOVERY_MINUTES:g} min after the drain to the end"
            f" {median:.2f} ms: {'met' if median <= limit else 'MISSED'}"
            f" (target <= {RECOVERY}x pre-spike)"
        )
    return lines


def write_csv(path: Path, samples: list[Sample]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(asdict(samples[0])) if samples else ["t"])
        writer.writeheader()
        for sample in samples:
            writer.writerow(asdict(sample))


def run_soak(plan: SoakPlan, server: URL) -> int:
    plan.out.mkdir(parents=True, exist_ok=True)
    with BenchDatabase(server) as bench_db:
        facts = bench_db.server_facts()
        autovacuum = bench_db.sql("SHOW autovacuum")[0][0]
        spike = (
            ""
            if plan.spike_at is None
            else (
                f"; spike of {plan.spike_rate:.0f}/s from minute {plan.spike_at:g} for"
                f" {plan.spike_minutes:g} min"
            )
        )
        print(
            f"# {plan.label}: PostgreSQL {facts['server_version']}, autovacuum={autovacuum};"
            f" rate {plan.rate:.0f}/s ({plan.batch} per enqueue_many), concurrency"
            f" {plan.concurrency}, {plan.minutes:g} min, retention {plan.retention:g} s{spike}",
            flush=True,
        )
        soak = Soak(plan, bench_db)
        try:
            samples = soak.run()
        finally:
            soak.close()
    csv_path = plan.out / f"{plan.label}.csv"
    write_csv(csv_path, samples)
    indexes_path = plan.out / f"{plan.label}-indexes.csv"
    with indexes_path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["t", "index", "bytes", "packed_bytes"])
        writer.writerows(soak.indexes)
    log_path = plan.out / f"{plan.label}.log"
    # the history mover logs every pass: what is left is the upkeep (VACUUM, REINDEX ...)
    log_path.write_text(
        "".join(line + "\n" for line in soak.log_lines if " jobs_moved: " not in line)
    )
    cpu_path = plan.out / f"{plan.label}-cpu.csv"
    with cpu_path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["t", "role", "cpu_s_per_s", "us_per_job"])
        writer.writerows(soak.cpu_rows)
    stalls_path = plan.out / f"{plan.label}-stalls.csv"
    soak.watch.write(stalls_path)
    print(f"# wrote {csv_path}, {indexes_path}, {cpu_path}, {log_path}, {stalls_path}")
    for line in soak.watch.summary():
        print(f"# {line}")
    from .chart import draw

    png = draw(
        plan.out / f"{plan.label}.png",
        samples,
        title=f"{plan.label}: {plan.rate:.0f} jobs/s offered, autovacuum={autovacuum}",
        offered=[plan.rate_at(s.t) for s in samples] if plan.spike_at is not None else plan.rate,
    )
    if png is not None:
        print(f"# wrote {png}")
    for line in verdict(plan, samples):
        print(f"# {line}")
    return 0
