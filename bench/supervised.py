"""Figures 2, 3 and 6: ``workerpool run bench.app:pool`` as real processes.

Each supervisor is ``sys.executable -m workerpool run bench.app:pool`` in its own process group
(``start_new_session``), pointed at the bench database by ``$WORKERPOOL_DATABASE_URL``. The
supervisor forks one child per queue, so "two worker children on one queue" is two supervisors
against the same database: the documented way to scale out, and the same shape as the two-process
ceiling (both compete for one queue through ``SKIP LOCKED``).

Drain: the children are started and registered first, then N jobs are enqueued in one
transaction, so they become visible together and one NOTIFY wakes every child. The rate is
computed from the rows themselves (first ``claimed_at`` to last ``finished_at``, database clock),
exactly as for the ceiling, so start-up and our polling are outside the window.

Memory: ``VmHWM`` (peak resident set) from ``/proc/<pid>/status`` of each supervisor and each of
its children, read after the drain while they are still alive.

Pickup: one idle supervisor; ``stamp`` jobs enqueued one at a time, ``gap`` apart; latency is the
handler's start (``time.monotonic()`` appended to a file, see ``bench.app``) minus the monotonic
time just before ``enqueue``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from workerpool import WorkerPool
from workerpool.process.oslayer import child_pids, usable_cpus

from . import app
from .database import BenchDatabase, libpq
from .report import percentile

log = logging.getLogger("workerpool.bench")

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
KIB_PER_MB = 1024.0


@dataclass
class Supervisor:
    """One ``workerpool run`` process (and its process group)."""

    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def children(self) -> list[int]:
        return child_pids(self.pid)

    def queue_children(self) -> list[int]:
        """The bench queue's children: ``bench``, or ``bench.0``, ``bench.1`` ... with
        ``--processes``."""
        name = f"workerpool: {app.QUEUE}"
        return [
            pid for pid in self.children() if (t := title(pid)) == name or t.startswith(f"{name}.")
        ]

    def stop(self) -> None:
        """SIGTERM (drain), then SIGKILL to the whole group if it outlives ``STOP_TIMEOUT``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("supervisor %d ignored SIGTERM; killing its group", self.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used (``/proc/<pid>/stat``), in seconds."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def title(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    return ""


def peak_rss_mb(pid: int) -> float | None:
    """``VmHWM`` of a live process, in MiB (None if it is gone)."""
    return _status_mb(pid, "VmHWM:")


def rss_mb(pid: int) -> float | None:
    """``VmRSS`` (resident now) of a live process, in MiB (None if it is gone)."""
    return _status_mb(pid, "VmRSS:")


def _status_mb(pid: int, field: str) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / KIB_PER_MB
    return None


class Launcher:
    """Starts supervisors on the bench database and waits until their children are working."""

    def __init__(
        self,
        bench_db: BenchDatabase,
        workdir: Path,
        concurrency: int = app.DEFAULT_CONCURRENCY,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.db = bench_db
        self.workdir = workdir
        self.concurrency = concurrency
        self.extra_env = dict(extra_env or {})  # e.g. the soak's retention and prefetch
        self._count = 0

    def env(self, *, notify: bool, stamp_file: Path | None) -> dict[str, str]:
        env = dict(os.environ)
        env["WORKERPOOL_DATABASE_URL"] = libpq(self.db.url)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env[app.NOTIFY_ENV] = "1" if notify else "0"
        env[app.CONCURRENCY_ENV] = str(self.concurrency)
        if stamp_file is not None:
            env[app.STAMP_FILE_ENV] = str(stamp_file)
        env.update(self.extra_env)
        return env

    def start(
        self,
        *,
        notify: bool = True,
        stamp_file: Path | None = None,
        metrics: bool = False,
        args: tuple[str, ...] = (),
        log_level: str = "WARNING",
    ) -> Supervisor:
        self._count += 1
        extra = ["--metrics-port", str(free_port())] if metrics else []
        extra += args
        heartbeats = self.workdir / f"heartbeats-{self._count}"
        heartbeats.mkdir(mode=0o700)
        log_path = self.workdir / f"supervisor-{self._count}.log"
        with open(log_path, "wb") as output:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    "bench.app:pool",
                    "--heartbeat-dir",
                    str(heartbeats),
                    "--log-level",
                    log_level,
                    *extra,
                ],
                cwd=ROOT,
                env=self.env(notify=notify, stamp_file=stamp_file),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Supervisor(process, log_path)

    @contextlib.contextmanager
    def running(
        self,
        count: int,
        *,
        notify: bool = True,
        stamp_file: Path | None = None,
        metrics: bool = False,
        processes: int | str = 1,
        log_level: str = "WARNING",
    ) -> Iterator[list[Supervisor]]:
        """``count`` supervisors, each with ``processes`` children of the bench queue (or
        ``"auto"``: one per usable core), all registered; stopped afterwards."""
        supervisors: list[Supervisor] = []
        args = ("--processes", f"{app.QUEUE}={processes}") if processes != 1 else ()
        children = usable_cpus() if processes == "auto" else int(processes)
        try:
            for _ in range(count):
                supervisors.append(
                    self.start(
                        notify=notify,
                        stamp_file=stamp_file,
                        metrics=metrics,
                        args=args,
                        log_level=log_level,
                    )
                )
            self.wait_registered(supervisors, count * children)
            yield supervisors
        finally:
            for supervisor in supervisors:
                supervisor.stop()

    def wait_registered(self, supervisors: list[Supervisor], count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while self.registered_workers() < count:
            for supervisor in supervisors:
                if supervisor.process.poll() is not None:
                    code = supervisor.process.returncode
                    raise RuntimeError(f"workerpool run exited with {code}:\n{supervisor.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} worker(s) did not register within {START_TIMEOUT}s")
            time.sleep(0.05)

    def registered_workers(self) -> int:
        return self.db.sql(
            "SELECT count(*) FROM workerpool_workers WHERE queue = %s", (app.QUEUE,)
        )[0][0]


# -- (2) drain and (6) memory -----------------------------------------------------------------


@dataclass(frozen=True)
class DrainResult:
    jobs_per_s: float
    parent_peak_mb: float
    child_peak_mb: float
    child_cpu_s: float = 0.0  # user + system CPU of the worker children, start to drained


def drain(
    launcher: Launcher,
    pool: WorkerPool,
    n: int,
    children: int,
    load: Callable[[WorkerPool, int], None],
    *,
    metrics: bool = False,
) -> DrainResult:
    """Drain ``n`` no-op jobs with ``children`` worker children; rate from the rows' timestamps.

    ``metrics``: the supervisors serve /metrics (``--metrics-port``), so every claim, outcome
    and handler also updates the metrics files."""
    bench_db = launcher.db
    bench_db.reset()
    with launcher.running(children, metrics=metrics) as supervisors:
        load(pool, n)
        wait_drained(bench_db, n, supervisors)
        parents = [peak_rss_mb(s.pid) for s in supervisors]
        kids = [peak_rss_mb(pid) for s in supervisors for pid in s.queue_children()]
        cpu = sum(cpu_seconds(pid) for s in supervisors for pid in s.queue_children())
    done, seconds = bench_db.drain_window()
    if done != n:
        raise RuntimeError(f"drain with {children} children: {done} of {n} jobs done")
    if None in parents or None in kids or len(kids) != children:
        raise RuntimeError(f"could not read the peak RSS of every process ({parents}, {kids})")
    return DrainResult(
        done / seconds if seconds > 0 else float("inf"), max(parents), max(kids), cpu
    )


def wait_drained(bench_db: BenchDatabase, n: int, supervisors: list[Supervisor]) -> None:
    deadline = time.monotonic() + 120.0 + n / 100.0
    while bench_db.live_jobs() > 0:
        for supervisor in supervisors:
            if supervisor.process.poll() is not None:
                raise RuntimeError(f"workerpool run died during the drain:\n{supervisor.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the drain of {n} jobs did not finish in time")
        time.sleep(0.1)


# -- (3) pickup latency ----------------------------------------------------------------------


WARM_UP_JOBS = 3


def pickup_latencies_ms(
    launcher: Launcher, pool: WorkerPool, jobs: int, gap_s: float, *, notify: bool
) -> list[float]:
    """Enqueue ``jobs`` stamp jobs one at a time ``gap_s`` apart into an idle worker."""
    launcher.db.reset()
    with tempfile.NamedTemporaryFile(dir=launcher.workdir, prefix="stamps-", delete=False) as f:
        stamp_file = Path(f.name)
    with launcher.running(1, notify=notify, stamp_file=stamp_file) as supervisors:
        enqueued = paced_enqueue(pool, WARM_UP_JOBS + jobs, gap_s)
        started = wait_stamps(stamp_file, len(enqueued), supervisors)
    latencies = [(started[job_id] - at) * 1000.0 for job_id, at in enqueued[WARM_UP_JOBS:]]
    return latencies


def paced_enqueue(pool: WorkerPool, count: int, gap_s: float) -> list[tuple[int, float]]:
    """Enqueue ``count`` jobs at a fixed rate; returns ``(job id, monotonic time before)``."""
    out: list[tuple[int, float]] = []
    first = time.monotonic()
    for i in range(count):
        slot = first + i * gap_s
        pause = slot - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing is the measurement's design, not a wait for a condition
        at = time.monotonic()
        out.append((pool.enqueue(app.stamp.__name__, {"i": i}), at))
    return out


def wait_stamps(path: Path, count: int, supervisors: list[Supervisor]) -> dict[int, float]:
    deadline = time.monotonic() + 30.0
    while True:
        stamps = read_stamps(path)
        if len(stamps) >= count:
            return stamps
        if any(s.process.poll() is not None for s in supervisors):
            raise RuntimeError(f"workerpool run died during pickup:\n{supervisors[0].tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(stamps)} of {count} stamp jobs ran within 30s")
        time.sleep(0.05)


def read_stamps(path: Path) -> dict[int, float]:
    stamps: dict[int, float] = {}
    for line in path.read_text().splitlines():
        job_id, at = line.split()
        stamps.setdefault(int(job_id), float(at))  # a job run twice keeps its first start
    return stamps


def p50_p90_p99(latencies: list[float]) -> tuple[float, float, float]:
    return percentile(latencies, 50), percentile(latencies, 90), percentile(latencies, 99)
