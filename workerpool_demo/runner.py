"""`workerpool demo`: the example backend under a real supervisor, a live view, and a verdict.

1. Pick a server (``$WORKERPOOL_DATABASE_URL``, else the embedded PostgreSQL), create a fresh
   database for the demo on it (never touching any other database), migrate it, create the example
   application's tables and its existing users.
2. Start ``workerpool run <demo app>:pool`` as a real child process (own session: a Ctrl-C here
   is relayed to it once, as a drain).
3. Play a burst of web requests against the app: signups (with double clicks, invalid addresses
   and one poison message), password resets, account deletions. With ``--chaos``, SIGKILL a
   random worker process every few seconds meanwhile.
4. Show per-queue counts and throughput until the work settles, drain the supervisor (SIGTERM),
   then print a summary whose checks decide the exit code: nothing left processing, every job
   done or dead on purpose, one email per idempotency key, no half-deleted user, cleanup runs that
   never overlapped.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from sqlalchemy import Connection, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from . import db, queries
from .errors import ConfigError, first_line
from .oslayer import set_parent_death_signal

DEFAULT_DATABASE = "workerpool_demo"
DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
LIVE_STATES = ("pending", "processing", "failed")
SHOWN_STATES = ("pending", "processing", "done", "failed", "dead")
TICK = 0.2  # seconds between two passes of the demo's loop (a screen refresh, not a wait)
DRAIN_WAIT = 60.0  # the supervisor drains for the app's drain_timeout (5 s) + its margin


@dataclass(frozen=True)
class Options:
    """What `workerpool demo` was asked to do (validated by :meth:`check`)."""

    duration: float = 15.0
    users: int = 150
    chaos: bool = False
    chaos_every: float = 3.0
    settle_timeout: float = 90.0
    database: str = DEFAULT_DATABASE
    seed: int | None = None

    def check(self) -> Options:
        if not 1 <= self.duration <= 3600:
            raise ConfigError(f"--duration must be within 1..3600 seconds, got {self.duration:g}")
        if not 10 <= self.users <= 100_000:
            raise ConfigError(f"--users must be within 10..100000, got {self.users}")
        if not 0.5 <= self.chaos_every <= 600:
            raise ConfigError(f"--chaos-every must be within 0.5..600 s, got {self.chaos_every:g}")
        if not 5 <= self.settle_timeout <= 3600:
            raise ConfigError(
                f"--settle-timeout must be within 5..3600 s, got {self.settle_timeout:g}"
            )
        if not DATABASE_NAME.match(self.database):
            raise ConfigError(
                f"--database {self.database!r} must be a plain lower-case name ([a-z_][a-z0-9_]*)"
            )
        return self


# -- where the demo application lives ---------------------------------------------------------


def locate_app() -> tuple[str, str | None]:
    """The demo app's module, and the directory to put on ``sys.path`` for it (None: installed).

    An installed workerpool ships ``examples/`` as ``workerpool.examples``; a bare checkout on
    ``PYTHONPATH`` (the test suite) imports it as ``examples`` from the repository root.
    """
    if importlib.util.find_spec("workerpool.examples") is not None:
        return "workerpool.examples.demo_app", None
    root = Path(__file__).resolve().parent.parent
    if (root / "examples" / "demo_app.py").is_file():
        return "examples.demo_app", str(root)
    raise ConfigError("the demo application (examples/demo_app.py) is not installed")


def import_app(module: str, path: str | None) -> ModuleType:
    if path is not None and path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)


# -- the database -------------------------------------------------------------------------------


def fresh_database(name: str) -> URL:
    """Create (or re-create) the demo's own database on the configured or embedded server."""
    with warnings.catch_warnings():  # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        server = db.resolve_url()
    if server.database == name:
        raise ConfigError(f"the server URL names database {name!r} already: use another --database")
    admin = create_engine(server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    quoted = admin.dialect.identifier_preparer.quote(name)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
    except Exception as exc:
        raise ConfigError(
            f"cannot create database {name!r} on {db.redact(server)}: {first_line(exc)}"
        ) from None
    finally:
        admin.dispose()
    return server.set(database=name)


def drop_database(url: URL) -> None:
    admin = create_engine(url.set(database="postgres"), poolclass=NullPool,
                          isolation_level="AUTOCOMMIT")
    quoted = admin.dialect.identifier_preparer.quote(url.database or "")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
    admin.dispose()


def url_text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def shown_url(url: URL) -> str:
    """The URL to print: a password is masked; the embedded server's empty one is shown as is."""
    return url.render_as_string(hide_password=bool(url.password))


# -- the burst of web requests ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One web request of the scenario, due ``at`` seconds after the start."""

    at: float
    kind: str  # signup | reset | delete
    index: int  # signup, reset: the signup's number; delete: the existing user's number
    email: str = ""
    name: str = ""


@dataclass
class Scenario:
    requests: list[Request]
    existing_users: int
    invalid_emails: set[str]
    poison_email: str


def plan(rng: random.Random, duration: float, users: int, poison_name: str) -> Scenario:
    """A launch-day burst: 40% of signups in the first second, the rest spread over the run.

    1 in 10 signups is double-clicked, 3% have an invalid address, one is the poison message;
    a quarter of new users ask for a password reset; some long-time users delete their account.
    """
    spread = max(duration * 0.7, 1.0)
    requests: list[Request] = []
    invalid: set[str] = set()
    poison_at = rng.randrange(users // 4, users // 2)
    for n in range(users):
        at = rng.uniform(0, 1.0) if rng.random() < 0.4 else rng.uniform(0, spread)
        email, name = f"user{n}@example.com", f"User {n}"
        if n == poison_at:
            email, name = f"user{n}@example.com", poison_name
        elif rng.random() < 0.03 or n == 1:
            email = rng.choice([f"user{n}@", f"user{n}.example.com", f"user {n}@example.com"])
            invalid.add(email)
        requests.append(Request(at, "signup", n, email, name))
        if rng.random() < 0.1:  # a double click: the same request again
            requests.append(Request(at + rng.uniform(0.05, 0.8), "signup", n, email, name))
        if email not in invalid and n != poison_at and rng.random() < 0.25:
            requests.append(Request(at + rng.uniform(0.5, 3.0), "reset", n))
    existing = max(5, users // 10)
    for k in rng.sample(range(existing), k=max(3, existing * 2 // 3)):
        requests.append(Request(rng.uniform(0, spread), "delete", k))
    requests.sort(key=lambda r: r.at)
    poison_email = f"user{poison_at}@example.com"
    return Scenario(requests, existing, invalid, poison_email)


class Backend:
    """Plays the scenario's requests through the example app's web-backend functions."""

    def __init__(self, app: ModuleType, scenario: Scenario, existing_ids: list[int]) -> None:
        self.app = app
        self.pending = list(scenario.requests)
        self.existing_ids = existing_ids
        self.signups: dict[int, int] = {}  # signup number -> user id
        self.counts: Counter[str] = Counter()

    def play_due(self, elapsed: float) -> None:
        due = [r for r in self.pending if r.at <= elapsed]
        if not due:
            return
        self.pending = self.pending[len(due):]
        with self.app.pool.engine.begin() as conn:
            for request in due:
                self._play(conn, request)

    def _play(self, conn: Connection, request: Request) -> None:
        self.counts[request.kind] += 1
        if request.kind == "signup":
            self.signups[request.index] = self.app.signup(conn, request.email, request.name)
        elif request.kind == "reset":
            self.app.request_password_reset(conn, self.signups[request.index])
        elif request.kind == "delete":
            self.app.request_deletion(conn, self.existing_ids[request.index])

    @property
    def done(self) -> bool:
        return not self.pending


# -- the supervisor process ---------------------------------------------------------------------

RUN_COMMAND = [sys.executable, "-m", "workerpool", "run"]
#: A short restart backoff: the poison message crashes the email child a few times in a row.
RUN_OPTIONS = ["--restart-delay", "0.25"]


def _drain_when_the_demo_dies() -> None:  # runs in the forked child, before exec
    set_parent_death_signal(signal.SIGTERM)


class Supervisor:
    """``workerpool run <app>:pool`` as a child process in its own session, logging to a file."""

    def __init__(self, app: str, path: str | None, url: URL, log_path: Path) -> None:
        self.heartbeat_dir = tempfile.mkdtemp(prefix="workerpool-demo-")
        env = dict(os.environ, WORKERPOOL_DATABASE_URL=url_text(url),
                   WORKERPOOL_HEARTBEAT_DIR=self.heartbeat_dir)
        if path is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [*RUN_COMMAND, f"{app}:pool", *RUN_OPTIONS],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_drain_when_the_demo_dies,
        )
        self.kills: list[tuple[float, int, str]] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def children(self) -> list[tuple[int, str]]:
        """``(pid, title)`` of each live child, from /proc (no signal is sent to find them)."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [(int(pid), process_title(int(pid))) for pid in text.split()]

    def kill_random_child(self, rng: random.Random, elapsed: float) -> tuple[int, str] | None:
        children = self.children()
        if not children:
            return None
        pid, title = rng.choice(children)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        self.kills.append((elapsed, pid, title))
        return pid, title

    def signal(self, signum: int) -> None:
        if self.running():
            self.process.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Leave nothing running: drain if still up (an error got us here), kill if that hangs."""
        if self.running():
            self.signal(signal.SIGTERM)
            if self.wait(DRAIN_WAIT) is None:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.heartbeat_dir, ignore_errors=True)

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def process_title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


# -- the live view ------------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    counts: dict[str, dict[str, int]]  # queue -> state -> count


def sample(conn: Connection, elapsed: float) -> Sample:
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for row in queries.count_by_queue_and_state(conn):
        counts[row.queue][row.state] = row.count
    return Sample(elapsed, dict(counts))


@dataclass
class LiveView:
    """Per-queue counts and throughput: redrawn in place on a terminal, else a line every 2 s."""

    out: TextIO
    queues: list[str]
    tty: bool = False
    history: list[Sample] = field(default_factory=list)
    _drawn: int = 0
    _last_line: float = -10.0

    def show(self, now: Sample, status: str) -> None:
        self.history.append(now)
        self.history = [s for s in self.history if now.at - s.at <= 2.0]
        lines = self.render(now, status)
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        elif now.at - self._last_line >= 2.0:
            self.out.write(self.one_line(now, status) + "\n")
            self._last_line = now.at
        self.out.flush()

    def rate(self, queue: str, now: Sample) -> float:
        first = self.history[0]
        span = now.at - first.at
        if span <= 0:
            return 0.0
        finished = ("done", "dead")
        before = sum(first.counts.get(queue, {}).get(s, 0) for s in finished)
        after = sum(now.counts.get(queue, {}).get(s, 0) for s in finished)
        return (after - before) / span

    def render(self, now: Sample, status: str) -> list[str]:
        head = f"{'queue':<15}" + "".join(f"{s:>11}" for s in SHOWN_STATES) + f"{'jobs/s':>9}"
        lines = [f"workerpool demo  {now.at:6.1f} s  {status}", head]
        for queue in self.queues:
            counts = now.counts.get(queue, {})
            cells = "".join(f"{counts.get(s, 0):>11}" for s in SHOWN_STATES)
            lines.append(f"{queue:<15}{cells}{self.rate(queue, now):>9.1f}")
        return lines

    def one_line(self, now: Sample, status: str) -> str:
        parts = []
        for queue in self.queues:
            counts = now.counts.get(queue, {})
            states = " ".join(f"{s}={counts.get(s, 0)}" for s in SHOWN_STATES)
            parts.append(f"{queue}: {states} ({self.rate(queue, now):.1f}/s)")
        return f"[{now.at:5.1f}s] {status} | " + " | ".join(parts)


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """Everything the summary needs to know about how the run went."""

    elapsed: float = 0.0
    settled: bool = False
    interrupted: bool = False
    supervisor_exit: int | None = None
    kills: list[tuple[float, int, str]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    peak_rate: dict[str, float] = field(default_factory=dict)


def settled(now: Sample, cron_queues: set[str]) -> bool:
    """No request-driven work left: nothing pending, processing or waiting to retry."""
    return all(
        counts.get(state, 0) == 0
        for queue, counts in now.counts.items()
        if queue not in cron_queues
        for state in LIVE_STATES
    )


def play(
    options: Options,
    app: ModuleType,
    backend: Backend,
    supervisor: Supervisor,
    view: LiveView,
    rng: random.Random,
) -> Run:
    """The demo's loop: play requests, cause chaos, refresh the view, until the work settles."""
    run = Run()
    cron_queues = {spec.queue for spec in app.pool.crons.values()}
    started = time.monotonic()
    next_kill = options.chaos_every
    try:
        while True:
            elapsed = time.monotonic() - started
            backend.play_due(elapsed)
            if options.chaos and elapsed >= next_kill and elapsed < options.duration:
                supervisor.kill_random_child(rng, elapsed)
                next_kill += options.chaos_every
            with app.pool.engine.connect() as conn:
                now = sample(conn, elapsed)
            view.show(now, status_line(options, supervisor, backend, elapsed))
            for queue in view.queues:
                run.peak_rate[queue] = max(run.peak_rate.get(queue, 0.0), view.rate(queue, now))
            if not supervisor.running():
                break
            if elapsed >= options.duration and backend.done and settled(now, cron_queues):
                run.settled = True
                break
            if elapsed >= options.duration + options.settle_timeout:
                break
            time.sleep(TICK)
    except KeyboardInterrupt:
        run.interrupted = True
    run.elapsed = time.monotonic() - started
    run.kills = list(supervisor.kills)
    run.requests = backend.counts
    return run


def status_line(options: Options, supervisor: Supervisor, backend: Backend, elapsed: float) -> str:
    phase = "requests arriving" if not backend.done else (
        "settling" if elapsed < options.duration + options.settle_timeout else "timed out"
    )
    chaos = f"  chaos: {len(supervisor.kills)} workers killed" if options.chaos else ""
    last = f" (last: {supervisor.kills[-1][2]})" if supervisor.kills else ""
    return f"{phase}{chaos}{last if options.chaos else ''}"


def drain(supervisor: Supervisor, out: TextIO) -> int | None:
    """SIGTERM: the supervisor drains and exits. A second Ctrl-C here means stop now (SIGQUIT)."""
    out.write("draining: SIGTERM to the supervisor (Ctrl-C again to stop at once)\n")
    out.flush()
    supervisor.signal(signal.SIGTERM)
    try:
        return supervisor.wait(DRAIN_WAIT)
    except KeyboardInterrupt:
        supervisor.signal(signal.SIGQUIT)
        return supervisor.wait(DRAIN_WAIT)


# -- the summary --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str


def summarise(conn: Connection, app: ModuleType, scenario: Scenario, backend: Backend,
              run: Run) -> tuple[list[str], list[Check]]:
    jobs = queries.job_outcomes(conn)
    lines = queue_table(jobs, run) + dead_letter_lines(jobs) + error_lines(conn)
    checks = [
        check_nothing_processing(jobs),
        check_every_job_finished(conn, jobs, app, scenario, run),
        check_one_job_per_signup(jobs, backend),
        check_one_email_per_key(conn, jobs, app),
        check_no_half_deleted_user(conn, jobs, app),
        check_cleanup_never_overlapped(jobs, app),
    ]
    return lines, checks


def queue_table(jobs: list[Any], run: Run) -> list[str]:
    by_queue: dict[str, list[Any]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue].append(job)
    head = (f"{'queue':<15}{'jobs':>7}{'done':>7}{'dead':>7}{'other':>7}{'claims':>8}"
            f"{'retried':>9}{'peak jobs/s':>13}")
    lines = [head]
    for queue, rows in sorted(by_queue.items()):
        states = Counter(job.state for job in rows)
        claims = sum(job.attempts for job in rows)
        retried = sum(1 for job in rows if job.attempts > 1)
        other = len(rows) - states["done"] - states["dead"]
        lines.append(f"{queue:<15}{len(rows):>7}{states['done']:>7}{states['dead']:>7}{other:>7}"
                     f"{claims:>8}{retried:>9}{run.peak_rate.get(queue, 0.0):>13.1f}")
    return lines


def dead_letter_lines(jobs: list[Any]) -> list[str]:
    dead = [job for job in jobs if job.state == "dead"]
    lines = [f"dead-letter queue: {len(dead)} jobs (workerpool dead list / retry)"]
    for job in dead:
        lines.append(f"  #{job.id:<6} {job.task:<20} {job.key or '':<16} {job.dead_reason:<10} "
                     f"after {job.attempts} of {job.max_attempts} attempts")
    return lines


def error_lines(conn: Connection) -> list[str]:
    rows = queries.count_errors_by_type(conn)
    if not rows:
        return ["error history: empty"]
    by_queue: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_queue[row.queue].append(f"{row.type} x{row.count}")
    return ["error history (each failed or interrupted attempt is kept on its job):"] + [
        f"  {queue}: {', '.join(entries)}" for queue, entries in sorted(by_queue.items())
    ]


def check_nothing_processing(jobs: list[Any]) -> Check:
    stuck = [job.id for job in jobs if job.state == "processing"]
    return Check(not stuck, f"nothing left processing{_ids(stuck)}")


def expected_dead(conn: Connection, app: ModuleType, scenario: Scenario) -> dict[str, str]:
    """Idempotency key -> dead_reason for the jobs the scenario meant to kill."""
    expected: dict[str, str] = {}
    emails = app.user_ids_by_email(conn)
    for email in scenario.invalid_emails:
        if email in emails:
            expected[f"welcome:{emails[email]}"] = "permanent"
    if scenario.poison_email in emails:
        expected[f"welcome:{emails[scenario.poison_email]}"] = "abandoned"
    return expected


def check_every_job_finished(
    conn: Connection, jobs: list[Any], app: ModuleType, scenario: Scenario, run: Run
) -> Check:
    expected = expected_dead(conn, app, scenario)
    cron_tasks = set(app.pool.crons)
    wrong, unfinished = [], []
    for job in jobs:
        if job.state == "done" and job.key not in expected:
            continue
        if job.state == "dead" and expected.get(job.key) == job.dead_reason:
            continue
        if job.state in ("pending", "failed") and (run.interrupted or job.task in cron_tasks):
            unfinished.append(job.id)
            continue
        wrong.append(f"#{job.id} {job.task} {job.state}/{job.dead_reason or '-'}")
    text = f"every job done, or dead on purpose ({dead_on_purpose(jobs, expected)})"
    if unfinished:
        text += f"; {len(unfinished)} waiting for the next start or tick"
    if wrong:
        text += ": NOT " + ", ".join(wrong[:10])
    return Check(not wrong, text)


def dead_on_purpose(jobs: list[Any], expected: dict[str, str]) -> str:
    rejected = sum(1 for job in jobs if job.state == "dead" and job.dead_reason == "permanent"
                   and expected.get(job.key) == "permanent")
    poison = [job for job in jobs if expected.get(job.key) == "abandoned"]
    if not poison:
        fate = "the poison message never arrived"
    elif poison[0].state == "dead":
        fate = f"the poison message dead/abandoned after {poison[0].attempts} claims"
    else:
        fate = f"the poison message still {poison[0].state} after {poison[0].attempts} claims"
    return f"{rejected} invalid addresses dead/permanent, {fate}"


def check_one_job_per_signup(jobs: list[Any], backend: Backend) -> Check:
    welcome = Counter(job.key for job in jobs if job.task == "send_welcome")
    users = len(set(backend.signups.values()))
    doubled = [key for key, n in welcome.items() if n > 1]
    ok = not doubled and len(welcome) == users
    return Check(ok, f"one welcome job per user: {backend.counts['signup']} signup requests "
                     f"(double clicks included) -> {users} users -> {len(welcome)} welcome jobs")


def check_one_email_per_key(conn: Connection, jobs: list[Any], app: ModuleType) -> Check:
    delivered = Counter(app.delivered_keys(conn))
    replays = app.replayed_requests(conn)
    twice = [key for key, n in delivered.items() if n > 1]
    email_done = {job.key for job in jobs if job.queue == "email" and job.state == "done"}
    missing = sorted(key for key in email_done if key not in delivered)
    ok = not twice and not missing
    text = (f"one email per idempotency key: {sum(delivered.values())} delivered for "
            f"{len(delivered)} keys; {replays} repeated requests (a job re-run after its worker "
            f"died) answered from the provider's idempotency cache")
    if twice:
        text += f"; DELIVERED TWICE: {', '.join(twice[:10])}"
    if missing:
        text += f"; done but never delivered: {', '.join(missing[:10])}"
    return Check(ok, text)


def check_no_half_deleted_user(conn: Connection, jobs: list[Any], app: ModuleType) -> Check:
    deletions = [job for job in jobs if job.task == "delete_user"]
    half, resumed, in_progress = [], 0, 0
    for job in deletions:
        user_id = int(job.key.removeprefix("delete:"))
        left = {store: n for store, n in app.remaining_rows(conn, user_id).items() if n}
        if job.state == "done" and left:
            half.append(f"user {user_id}: {left}")
        elif job.state != "done":
            in_progress += 1
    resumed = app.resumed_deletions(conn)
    text = (f"no half-deleted user: {len(deletions) - in_progress} deletions complete in every "
            f"store; {resumed} resumed from a checkpoint instead of starting over")
    if in_progress:
        text += f"; {in_progress} in progress, resuming at their checkpoint on the next start"
    if half:
        text += "; HALF DELETED: " + "; ".join(half[:5])
    return Check(not half, text)


def check_cleanup_never_overlapped(jobs: list[Any], app: ModuleType) -> Check:
    """Each cron run is one job: its last claim and its finish bound the run (database clock)."""
    cron_tasks = set(app.pool.crons)
    runs = sorted((job for job in jobs if job.task in cron_tasks and job.state == "done"),
                  key=lambda job: job.claimed_at)
    overlaps = [f"#{a.id}/#{b.id}" for a, b in itertools.pairwise(runs)
                if b.claimed_at < a.finished_at]
    removed: Counter[str] = Counter()
    for job in runs:
        removed.update((job.checkpoint or {}).get("done", {}))
    swept = ", ".join(f"{n} {table}" for table, n in sorted(removed.items())) or "nothing"
    if not runs:
        return Check(False, "session cleanup never ran")
    if overlaps:
        return Check(False, f"session cleanup runs OVERLAPPED: {', '.join(overlaps[:5])}")
    return Check(True, f"session cleanup ran {len(runs)} times, never overlapping; "
                       f"removed {swept} (expired or past retention)")


def _ids(ids: list[int]) -> str:
    return f": {', '.join(f'#{i}' for i in ids[:10])}" if ids else ""




# -- entry point --------------------------------------------------------------------------------


#: The example's hourly sweep runs every 3 seconds in the demo (croniter's sixth field: seconds).
DEMO_ENVIRONMENT = {"SESSION_CLEANUP_SCHEDULE": "* * * * * */3"}


@contextmanager
def demo_environment(url: URL) -> Iterator[None]:
    """Point this process (and the supervisor it starts) at the demo database and schedule."""
    wanted = {db.URL_ENV: url_text(url), **DEMO_ENVIRONMENT}
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main(options: Options, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the exit code (0: every check passed, 1: one failed, 130: Ctrl-C)."""
    options.check()
    module, path = locate_app()
    out.write("workerpool demo: preparing a fresh database...\n")
    out.flush()
    url = fresh_database(options.database)
    with demo_environment(url):
        app = import_app(module, path)
        try:
            return Demo(options, app, module, path, url, out).run()
        finally:
            app.pool.dispose()


class Demo:
    def __init__(self, options: Options, app: ModuleType, module: str, path: str | None,
                 url: URL, out: TextIO) -> None:
        self.options, self.app, self.url, self.out = options, app, url, out
        self.module, self.path = module, path
        self.rng = random.Random(options.seed)
        self.scenario = plan(self.rng, options.duration, options.users, app.POISON_NAME)

    def run(self) -> int:
        existing = self.prepare()
        log_path = Path(tempfile.gettempdir()) / f"{self.options.database}.log"
        supervisor = Supervisor(self.module, self.path, self.url, log_path)
        try:
            self.say(f"supervisor pid {supervisor.pid} runs {self.module}:pool "
                     f"(log: {log_path}); Ctrl-C drains")
            backend = Backend(self.app, self.scenario, existing)
            view = LiveView(self.out, sorted(self.app.pool.queues), tty=self.out.isatty())
            run = play(self.options, self.app, backend, supervisor, view, self.rng)
            run.supervisor_exit = self.stop(supervisor)
        finally:
            supervisor.close()
        return self.report(backend, run)

    def prepare(self) -> list[int]:
        self.app.pool.migrate()
        self.app.create_tables(self.app.pool.engine)
        with self.app.pool.engine.begin() as conn:
            return self.app.seed_existing_users(conn, self.scenario.existing_users, self.rng)

    def stop(self, supervisor: Supervisor) -> int | None:
        if not supervisor.running():
            self.say(f"the supervisor exited on its own ({supervisor.process.returncode}); "
                     f"its log ends with:\n{supervisor.log_tail()}")
            return supervisor.process.returncode
        code = drain(supervisor, self.out)
        if code is None:
            self.say(f"the supervisor did not exit within {DRAIN_WAIT:g} s; killing it")
        return code

    def report(self, backend: Backend, run: Run) -> int:
        with self.app.pool.engine.connect() as conn:
            lines, checks = summarise(conn, self.app, self.scenario, backend, run)
        checks.append(Check(run.supervisor_exit == 0,
                            f"the supervisor drained and exited with status {run.supervisor_exit}"))
        if not run.settled and not run.interrupted:
            checks.append(Check(False, f"the work did not settle within "
                                       f"{self.options.settle_timeout:g} s after the requests"))
        self.print_summary(run, lines, checks)
        if run.interrupted:
            return 130
        return 0 if all(check.ok for check in checks) else 1

    def print_summary(self, run: Run, lines: list[str], checks: list[Check]) -> None:
        chaos = (f"; chaos: {len(run.kills)} worker processes killed with SIGKILL mid-run"
                 if self.options.chaos else "")
        requests = ", ".join(f"{n} {kind}" for kind, n in sorted(run.requests.items()))
        out = [
            "",
            f"workerpool demo: summary after {run.elapsed:.1f} s{chaos}",
            f"requests played: {requests}",
            "",
            *lines,
            "",
            "checks:",
            *(f"  [{'ok' if c.ok else 'FAIL'}] {c.text}" for c in checks),
            "",
            f"result: {'PASS' if all(c.ok for c in checks) else 'FAIL'}"
            + (" (interrupted)" if run.interrupted else ""),
            f"inspect the jobs: WORKERPOOL_DATABASE_URL='{shown_url(self.url)}' workerpool status",
        ]
        self.out.write("\n".join(out) + "\n")
        self.out.flush()

    def say(self, text: str) -> None:
        self.out.write(f"workerpool demo: {text}\n")
        self.out.flush()
