"""workerpool behind a real PgBouncer in transaction pooling mode (DESIGN §10, research Q15).

Each test starts its own ``pgbouncer`` (``pool_mode = transaction``, ``default_pool_size = 2``) in
front of the test database and runs `workerpool run tests.apps.bouncer:pool` through it: every
connection of the supervisor's children, of the handlers and of the test's enqueues goes through
the bouncer, so at most two PostgreSQL backends serve them all.

CI (``CI`` set) must have pgbouncer installed (``.ci/run`` installs it): there a missing binary
fails the test. Locally it is skipped with the reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL

from bench import bouncer as bouncer_config
from tests.apps import bouncer as app
from tests.helpers.db import libpq
from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, alive, kill_all
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.migrate import drift
from workerpool.process import settings
from workerpool.sql import db
from workerpool.sql.writes import INSERT_CHUNK

POOL_SIZE = 2
#: enqueue_many sends half by COPY, and half (one of them keyed) as two pipelined chunks
JOBS = 2 * (INSERT_CHUNK + 50)
BROKEN = "prepared statement"


@dataclass
class Bouncer:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def url(self, db_url: URL) -> URL:
        return bouncer_config.through_bouncer(db_url, self.port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found:
        return found
    reason = "pgbouncer is not installed (apt-get install pgbouncer)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run these tests (.ci/run installs it)")
    pytest.skip(reason)


def backend(server_url: URL) -> tuple[str, int]:
    """Where the bouncer reaches the test server: TCP, or the embedded server's socket."""
    return bouncer_config.server_address(server_url)


def accepts(bouncer: Bouncer, server_url: URL) -> bool:
    if bouncer.proc.poll() is not None:
        raise AssertionError(f"pgbouncer exited ({bouncer.proc.returncode})\n{bouncer.log()}")
    try:
        with psycopg.connect(libpq(bouncer.url(server_url)), connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.fixture
def bouncer(server_url: URL) -> Iterator[Bouncer]:
    """A pgbouncer in transaction mode on a free port in front of the test's database."""
    binary = pgbouncer_binary()
    server = backend(server_url)
    directory = Path(tempfile.mkdtemp(prefix="wp-pgbouncer-"))  # not tmp_path: 0700 parents
    newer = bouncer_config.newer(binary)
    as_user = bouncer_config.run_as(server)
    started: list[Bouncer] = []
    try:
        for tries_left in reversed(range(3)):
            port = bouncer_config.free_port()
            config = bouncer_config.write_config(directory, port, server, newer=newer,
                                                 pool_size=POOL_SIZE, max_clients=100)
            log_path = directory / f"pgbouncer-{port}.log"
            with log_path.open("wb") as log_file:
                proc = subprocess.Popen([binary, *as_user, str(config)],
                                        stdin=subprocess.DEVNULL, stdout=log_file,
                                        stderr=log_file, start_new_session=True)
            running = Bouncer(proc, port, log_path)
            started.append(running)
            try:
                wait_until(lambda: accepts(running, server_url), 10, interval=0.1,
                           message="pgbouncer accepting connections")
                break
            except AssertionError:
                # the free port was taken (by a test running in parallel) before pgbouncer
                # bound it: pick another one
                if not tries_left or "Address already in use" not in running.log():
                    raise
        yield running
    finally:
        for bouncer in started:
            bouncer.proc.kill()
            bouncer.proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def launch(db_url: URL, bouncer: Bouncer, tmp_path: Path) -> Iterator:
    """Start `workerpool run tests.apps.bouncer:pool` through the bouncer; killed afterwards."""
    running: list[Supervisor] = []

    def start(*, pgbouncer_mode: bool) -> Supervisor:
        heartbeat_dir = tmp_path / f"heartbeats{len(running)}"
        heartbeat_dir.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))}
        url = bouncer.url(db_url).render_as_string(hide_password=False)
        env.update(WORKERPOOL_DATABASE_URL=url, PYTHONPATH=str(ROOT))
        if pgbouncer_mode:
            env[settings.PGBOUNCER_ENV] = "1"
        log_path = tmp_path / f"supervisor{len(running)}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workerpool", "run", "tests.apps.bouncer:pool",
                 "--heartbeat-dir", str(heartbeat_dir)],
                env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True, cwd=ROOT)
        running.append(Supervisor(proc, log_path, heartbeat_dir, env))
        return running[-1]

    yield start
    kill_all(running, show_logs=True)


@pytest.fixture
def ledger(sql) -> None:
    sql(app.LEDGER)


def enqueue_through(bouncer: Bouncer, db_url: URL, count: int) -> list[int]:
    pool = WorkerPool(bouncer.url(db_url))
    pool.queue("work")
    pool.task(queue="work", name="touch")(app.touch)
    try:
        items: list[tuple] = [("touch", {"n": n}) for n in range(count)]
        half = count // 2
        items[half] = (*items[half], {"key": "through-the-bouncer"})
        return pool.enqueue_many(items[:half]) + pool.enqueue_many(items[half:])
    finally:
        pool.dispose()


def states(sql) -> dict[str, int]:
    return dict(sql("SELECT state, count(*) FROM workerpool_jobs WHERE task = 'touch'"
                    " GROUP BY state"))


def server_backends(sql) -> int:
    """Client backends on the test database other than the test's own direct connection
    (autovacuum workers show up there too once the test's inserts trigger an analyze)."""
    return sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
               " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")[0][0]


def children_started(sup: Supervisor) -> dict[str, int]:
    started: dict[str, int] = {}
    for event in sup.events("child_started"):
        started[event.fields["worker"]] = started.get(event.fields["worker"], 0) + 1
    return started


def test_pgbouncer_mode_runs_every_job_and_cron_tick_once(launch, bouncer, db_url, sql, ledger,
                                                          monkeypatch):
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")  # the test's own enqueue engine, too
    sup = launch(pgbouncer_mode=True)
    sup.wait_running("work", "cron", "@maintenance")
    ids = enqueue_through(bouncer, db_url, JOBS)
    assert len(ids) == JOBS

    most = 0

    def all_done_and_three_cron_runs() -> bool:
        nonlocal most
        most = max(most, server_backends(sql))
        finished = sql("SELECT count(*) FROM bouncer_ledger WHERE kind = 'cron'"
                       " AND ended_at IS NOT NULL")[0][0]
        return states(sql) == {"done": JOBS} and finished >= 3

    wait_until(all_done_and_three_cron_runs, 40, interval=0.1,
               message=f"{JOBS} jobs done and three cron runs\n{sup.log()[-3000:]}")

    # every job ran exactly once, through the bouncer, and nothing is left processing
    assert sql("SELECT count(*), count(DISTINCT job_id) FROM bouncer_ledger"
               " WHERE kind = 'task'") == [(JOBS, JOBS)]
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'"
               " AND task = 'touch'") == [(0,)]
    # all of it went over at most default_pool_size PostgreSQL connections
    assert 1 <= most <= POOL_SIZE, most
    # cron: each tick at most once, and no run started before the previous one ended
    runs = sql("SELECT tick, started_at, ended_at FROM bouncer_ledger WHERE kind = 'cron'"
               " ORDER BY started_at")
    ticks = [tick for tick, _, _ in runs]
    assert len(ticks) == len(set(ticks)), ticks
    for (_, _, ended), (_, started, _) in itertools.pairwise(runs):
        assert ended is not None and ended <= started, runs
    # the children are the first ones: no crash, no restart, no broken session state
    assert children_started(sup) == {"work": 1, "cron": 1, "@maintenance": 1}, sup.log()
    assert not sup.events("child_exited")
    assert all(alive(sup.child_pid(worker)) for worker in ("work", "cron", "@maintenance"))
    assert BROKEN not in sup.log() and "database_error" not in sup.log(), sup.log()[-3000:]


def test_a_cancel_reaches_a_running_job_without_notifications(launch, bouncer, db_url, sql,
                                                               ledger, monkeypatch, tmp_path):
    """Behind the bouncer there is no LISTEN: the worker reads its cancel requests back (every
    poll interval while it runs jobs, and at each lease renewal)."""
    monkeypatch.setenv(settings.PGBOUNCER_ENV, "1")
    sup = launch(pgbouncer_mode=True)
    sup.wait_running("work")
    pool = WorkerPool(bouncer.url(db_url))
    pool.queue("work")
    pool.task(queue="work", name="waits")(app.waits)
    stamp = tmp_path / "seen"
    try:
        job_id = pool.enqueue("waits", {"stamp": str(stamp)})
        wait_until(lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)
                   == [("processing",)], 20, message=f"the job runs\n{sup.log()[-2000:]}")
        asked = time.time()
        assert pool.cancel([job_id], reason="behind the bouncer").stopping == [job_id]
        wait_until(lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)
                   == [("cancelled",)], 20, message=f"cancelled\n{sup.log()[-2000:]}")
        wait_until(stamp.exists, 5, message="the handler saw its cancel")
    finally:
        pool.dispose()
    latency = float(stamp.read_text()) - asked
    print(f"behind PgBouncer the cancel reached the handler in {latency * 1000:.0f} ms")
    assert latency < 10, latency  # the poll interval (0.2 s) on an idle machine
    assert BROKEN not in sup.log() and "database_error" not in sup.log(), sup.log()[-3000:]


def test_without_the_flag_transaction_pooling_breaks_prepared_statements(launch, bouncer, db_url,
                                                                       sql, ledger):
    """psycopg prepares a statement after 5 runs on one client connection; the bouncer hands the
    next transaction another server connection: "prepared statement _pg3_0 does not exist" /
    "already exists" / "bind message supplies 5 parameters, but prepared statement requires 16"
    in the worker's own calls, the maintenance passes and the handlers' statements alike."""
    sup = launch(pgbouncer_mode=False)
    sup.wait_running("work", "cron", "@maintenance")
    enqueue_through(bouncer, db_url, JOBS)
    wait_until(lambda: BROKEN in sup.log(), 30, interval=0.2,
               message=f"a prepared-statement error\n{sup.log()[-3000:]}")
    assert "database_error" in sup.log()  # the worker's own transactions failed and were retried


def test_migrate_through_the_bouncer(bouncer, empty_db_url, tmp_path):
    """`workerpool migrate` (one transaction of distinct statements) works through the bouncer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "WORKER_"))}
    env.update({"WORKERPOOL_DATABASE_URL":
                bouncer.url(empty_db_url).render_as_string(hide_password=False),
                "PYTHONPATH": str(ROOT), settings.PGBOUNCER_ENV: "1"})
    done = subprocess.run([sys.executable, "-m", "workerpool", "migrate"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    engine = db.create(empty_db_url)  # checked directly on PostgreSQL
    try:
        with engine.connect() as conn:
            assert drift(conn) == []
    finally:
        engine.dispose()

