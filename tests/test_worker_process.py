"""The worker runtime as a real process (tests/worker_runner.py running tests/runtime_app.py):
database restarts, terminated backends, a handler that never returns, kill -9.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url

from tests.conftest import ROOT, wait_until
from workerpool import WorkerPool, db
from workerpool.migrate import upgrade


class WorkerProcess:
    """``python -m tests.worker_runner``; its stdout lines are stamped as they arrive."""

    def __init__(self, url: URL, *orphans: str, **env: str) -> None:
        environ = {**os.environ, "PYTHONPATH": str(ROOT),
                   "WORKERPOOL_DATABASE_URL": url.render_as_string(hide_password=False), **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.worker_runner", "tests.runtime_app:pool", "work",
             *orphans],
            cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, None), daemon=True),
        ]
        for reader in self.readers:
            reader.start()
        self.id = wait_until(self._worker_id, 20, message="worker process started")

    def _read(self, stream, sink) -> None:
        for line in stream:
            if sink is None:
                self.stderr.append(line)
            else:
                sink.append((time.monotonic(), line.strip()))

    def _worker_id(self) -> str | None:
        return next((line[7:] for _, line in self.lines if line.startswith("worker ")), None)

    def ticks(self, since: float = 0.0) -> list[float]:
        return [at for at, line in self.lines if line == "tick" and at >= since]

    def logged(self, text: str) -> bool:
        return any(text in line for line in self.stderr)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(15)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for reader in self.readers:
            reader.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def spawn() -> Iterator:
    started: list[WorkerProcess] = []

    def start(url: URL, *orphans: str, **env: str) -> WorkerProcess:
        started.append(WorkerProcess(url, *orphans, **env))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def counts(sql) -> dict[str, int]:
    return dict(sql("SELECT state, count(*) FROM workerpool_jobs GROUP BY state"))


# -- a PostgreSQL server of our own, to stop and start ------------------------------------------


class PrivateCluster:
    """A pgserver cluster in a temporary directory (never the shared server)."""

    def __init__(self) -> None:
        import pgserver

        self.dir = Path(tempfile.mkdtemp(prefix="wp-runtime-pg-"))
        self.server = pgserver.get_server(self.dir / "data", cleanup_mode="delete")
        self.socket_dir = self.server.get_postmaster_info().socket_dir
        self.url = db.normalise(make_url(self.server.get_uri()))

    def pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", *args], pgdata=self.server.pgdata, user=self.server.system_user,
               timeout=30)

    def stop(self, mode: str = "immediate") -> None:
        self.pg_ctl("-m", mode, "stop")

    def start(self) -> None:
        self.pg_ctl("-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.server.log),
                    "start")

    def close(self) -> None:
        self.server.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    private = PrivateCluster()
    try:
        upgrade(private.url)
        yield private
    finally:
        private.close()


def test_a_postgres_restart_loses_nothing_and_the_worker_rides_it_out(cluster, spawn):
    """Immediate stop (a crash, for clients), an outage longer than stale_after, start."""
    pool = WorkerPool(cluster.url)
    pool.queue("work")
    pool.task(queue="work", name="nap")(lambda job: None)  # enqueue side only
    conn = psycopg.connect(cluster.server.get_uri(), autocommit=True)

    def sql(statement: str, *params) -> list[tuple]:
        nonlocal conn
        if conn.closed or conn.broken:
            conn = psycopg.connect(cluster.server.get_uri(), autocommit=True)
        return conn.execute(statement, params or None).fetchall()

    try:
        long_id = pool.enqueue("nap", {"seconds": 4}, priority=10)
        pool.enqueue_many([("nap", {"seconds": 0.1}) for _ in range(40)])
        worker = spawn(cluster.url, WORKER_CLAIM_STALE_MS="1000")
        wait_until(lambda: counts(sql).get("done", 0) >= 6, 20, message="some jobs done")
        pool.dispose()
        conn.close()
        cluster.stop("immediate")
        down = time.monotonic()
        # The outage outlasts stale_after (1 s): leases of in-flight jobs go stale meanwhile.
        wait_until(lambda: worker.logged("database call failed")
                   and time.monotonic() - down > 1.5, 15, message="outage noticed")
        assert worker.ticks(since=down + 0.5) == []  # no heartbeat while the database is gone
        assert worker.proc.poll() is None
        cluster.start()
        up = time.monotonic()
        wait_until(lambda: counts(sql) == {"done": 41}, 30, message="every job done")
        assert worker.ticks(since=up)  # heartbeats again
        # The long job spanned the outage: its lease was renewed before any claim, so its own
        # worker did not take it again through the stale arm.
        assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", long_id) == [(1,)]
        assert worker.proc.poll() is None  # the same process throughout: no crash, no restart
        assert worker.stop() == 0
    finally:
        conn.close()
        pool.dispose()


def test_terminating_every_worker_backend_mid_run_loses_nothing(db_url, sql, spawn):
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name="nap")(lambda job: None)
    try:
        pool.enqueue_many([("nap", {"seconds": 0.05}) for _ in range(60)])
        worker = spawn(db_url)
        for round_ in range(1, 5):
            wait_until(lambda r=round_: counts(sql).get("done", 0) >= 10 * r, 20)
            killed = sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                         " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                         " AND application_name LIKE 'workerpool%%'")
            assert killed[0][0] >= 1
        wait_until(lambda: counts(sql) == {"done": 60}, 30, message="every job done")
        assert sql("SELECT max(attempts) FROM workerpool_jobs") == [(1,)]  # nothing re-run
        assert worker.logged("listener disconnected")
        wait_until(lambda: sql("SELECT count(*) FROM pg_stat_activity"
                               " WHERE application_name = 'workerpool-listen:work'") == [(1,)],
                   10, message="the listener subscribed again")
        assert worker.proc.poll() is None
        assert worker.stop() == 0
    finally:
        pool.dispose()


def test_a_handler_that_ignores_its_timeout_gets_the_process_recycled(db_url, sql, spawn):
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name="stuck", timeout=0.3)(lambda job: None)
    try:
        job_id = pool.enqueue("stuck", {})
    finally:
        pool.dispose()
    worker = spawn(db_url, RUNTIME_RECYCLE_GRACE="0.5")
    # The handler thread never returns, yet the process exits (its threads are daemons).
    assert worker.proc.wait(20) == 75
    state, errors = sql("SELECT state, errors FROM workerpool_jobs WHERE id = %s", job_id)[0]
    assert state == "failed"
    assert [e["type"] for e in errors] == ["TimeoutError"]
    assert "in stuck" in errors[0]["traceback"]
    assert sql("SELECT count(*) FROM workerpool_workers") == [(0,)]  # unregistered on the way out


def test_a_checkpoint_survives_a_crash(db_url, sql, spawn):
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name="resumable", max_attempts=3)(lambda job: None)
    try:
        job_id = pool.enqueue("resumable", {})
    finally:
        pool.dispose()
    first = spawn(db_url)
    wait_until(lambda: sql("SELECT checkpoint FROM workerpool_jobs")[0][0] == {"step": 1}, 20)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    second = spawn(db_url, first.id)  # the replacement releases the dead one's claims at boot
    wait_until(lambda: counts(sql) == {"done": 1}, 20, message="job resumed and done")
    attempts, checkpoint, errors = sql(
        "SELECT attempts, checkpoint, errors FROM workerpool_jobs WHERE id = %s", job_id)[0]
    assert attempts == 2
    assert checkpoint == {"step": 2, "resumed_from": {"step": 1}, "attempt": 2}
    assert [(e["type"], e["worker"]) for e in errors] == [("WorkerLost", first.id)]
    assert second.stop() == 0
