"""The worker runtime as a real process: database restarts, terminated backends, a handler that
never returns, kill -9.

Most tests run one Worker per process through tests/apps/worker_runner.py (stdout reports its
ticks); the ones about children and restarts run `workerpool run tests.apps.runtime:pool`.
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

from tests.helpers.db import states
from tests.helpers.paths import ROOT
from tests.helpers.processes import kill_group
from tests.helpers.waiting import wait_until
from workerpool import WorkerPool
from workerpool.migrate import upgrade
from workerpool.sql import db


class WorkerProcess:
    """``python -m tests.apps.worker_runner``; its stdout lines are stamped as they arrive."""

    def __init__(self, url: URL, *orphans: str, **env: str) -> None:
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "WORKERPOOL_DATABASE_URL": url.render_as_string(hide_password=False),
            **env,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.apps.worker_runner",
                "tests.apps.runtime:pool",
                "work",
                *orphans,
            ],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
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

        pg_ctl(["-w", *args], pgdata=self.server.pgdata, user=self.server.system_user, timeout=30)

    def stop(self, mode: str = "immediate") -> None:
        self.pg_ctl("-m", mode, "stop")

    def start(self) -> None:
        self.pg_ctl(
            "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.server.log), "start"
        )

    def close(self) -> None:
        # pgserver's cleanup() does not stop a postmaster that pg_ctl (re)started: stop it here.
        try:
            self.stop("immediate")
        except Exception:  # already stopped
            pass
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
        wait_until(lambda: states(sql).get("done", 0) >= 6, 20, message="some jobs done")
        pool.dispose()
        conn.close()
        cluster.stop("immediate")
        down = time.monotonic()
        # The outage outlasts stale_after (1 s): leases of in-flight jobs go stale meanwhile.
        wait_until(
            lambda: worker.logged("database call failed") and time.monotonic() - down > 1.5,
            15,
            message="outage noticed",
        )
        assert worker.ticks(since=down + 0.5) == []  # no heartbeat while the database is gone
        assert worker.proc.poll() is None
        cluster.start()
        up = time.monotonic()
        wait_until(lambda: states(sql) == {"done": 41}, 30, message="every job done")
        assert worker.ticks(since=up)  # heartbeats again
        # The long job spanned the outage: its lease was renewed before any claim, so its own
        # worker did not take it again through the stale arm.
        assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", long_id) == [(1,)]
        assert worker.proc.poll() is None  # the same process throughout: no crash, no restart
        assert worker.stop() == 0
    finally:
        conn.close()
        pool.dispose()


def enqueue_one(db_url, task: str, **task_options) -> int:
    """Enqueue one job of ``task`` (the handler itself runs in the spawned worker process)."""
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name=task, **task_options)(lambda job: None)
    try:
        return pool.enqueue(task, {})
    finally:
        pool.dispose()


def test_a_handler_that_ignores_its_timeout_gets_the_process_recycled(db_url, sql, spawn):
    job_id = enqueue_one(db_url, "stuck", timeout=0.3)
    worker = spawn(db_url, RUNTIME_RECYCLE_GRACE="0.5")
    # The handler thread never returns, yet the process exits (its threads are daemons).
    assert worker.proc.wait(20) == 75
    state, errors = sql("SELECT state, errors FROM workerpool_jobs WHERE id = %s", job_id)[0]
    assert state == "failed"
    assert [e["type"] for e in errors] == ["TimeoutError"]
    assert "in stuck" in errors[0]["traceback"]
    assert sql("SELECT count(*) FROM workerpool_workers") == [(0,)]  # unregistered on the way out


def test_a_checkpoint_survives_a_crash(db_url, sql, spawn):
    job_id = enqueue_one(db_url, "resumable", max_attempts=3)
    first = spawn(db_url)
    wait_until(lambda: sql("SELECT checkpoint FROM workerpool_jobs")[0][0] == {"step": 1}, 20)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    second = spawn(db_url, first.id)  # the replacement releases the dead one's claims at boot
    wait_until(lambda: states(sql) == {"done": 1}, 20, message="job resumed and done")
    attempts, checkpoint, errors = sql(
        "SELECT attempts, checkpoint, errors FROM workerpool_jobs WHERE id = %s", job_id
    )[0]
    assert attempts == 2
    assert checkpoint == {"step": 2, "resumed_from": {"step": 1}, "attempt": 2}
    assert [(e["type"], e["worker"], e["attempt"]) for e in errors] == [("WorkerLost", first.id, 1)]
    assert second.stop() == 0


# -- under `workerpool run` ---------------------------------------------------------------------


class Supervised:
    """`workerpool run tests.apps.runtime:pool` in its own session, logging to a file."""

    def __init__(self, url: URL, tmp: Path, **env: str) -> None:
        heartbeats = tmp / "heartbeats"
        heartbeats.mkdir(mode=0o700, parents=True)
        self.log_path = tmp / "supervisor.log"
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "RUNTIME_"))
        }
        environ.update(
            {
                "PYTHONPATH": str(ROOT),
                **env,
                "WORKERPOOL_DATABASE_URL": url.render_as_string(hide_password=False),
            }
        )
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    "tests.apps.runtime:pool",
                    "--queue",
                    "work",
                    "--heartbeat-dir",
                    str(heartbeats),
                ],
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=ROOT,
            )

    def lines(self, event: str, *fields: str) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [
            line
            for line in text.splitlines()
            if f" {event}: " in line and all(f in line for f in fields)
        ]

    def close(self) -> None:
        kill_group(self.proc)
        self.proc.wait(10)


@pytest.fixture
def supervise(tmp_path) -> Iterator:
    started: list[Supervised] = []

    def start(url: URL, **env: str) -> Supervised:
        started.append(Supervised(url, tmp_path / str(len(started)), **env))
        return started[-1]

    yield start
    for supervisor in started:
        supervisor.close()


def test_under_workerpool_run_terminating_every_backend_restarts_no_child(db_url, sql, supervise):
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name="nap")(lambda job: None)
    try:
        pool.enqueue_many([("nap", {"seconds": 0.05}) for _ in range(60)])
        run = supervise(db_url)
        last_kill = sql("SELECT now() - interval '1 hour'")[0][0]
        for round_ in range(1, 5):
            wait_until(lambda r=round_: states(sql).get("done", 0) >= 10 * r, 30)
            # prefetched jobs run on during the outage, so one write may finish several rounds'
            # worth of jobs: kill only once the child has reconnected (a backend started after
            # the last kill; a killed one may still be listed while it exits)
            wait_until(
                lambda since=last_kill: (
                    sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name = 'workerpool:work' AND backend_start > %s",
                        since,
                    )[0][0]
                    >= 1
                ),
                30,
                message="the child reconnected",
            )
            last_kill = sql("SELECT clock_timestamp()")[0][0]
            killed = sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name LIKE 'workerpool%%'"
            )
            assert killed[0][0] >= 1
        wait_until(lambda: states(sql) == {"done": 60}, 30, message="every job done")
        assert sql("SELECT max(attempts) FROM workerpool_jobs") == [(1,)]  # nothing re-run
        wait_until(
            lambda: (
                sql(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                    " AND application_name = 'workerpool-listen:work'"
                )
                == [(1,)]
            ),
            10,
            message="the listener subscribed again",
        )
        assert run.lines("listener_reconnect")
        assert run.lines("child_exited") == []  # no child crashed, none was restarted
        assert len(run.lines("child_started", "worker=work")) == 1
    finally:
        pool.dispose()


def test_under_workerpool_run_a_stuck_handler_recycles_its_child_and_work_goes_on(
    db_url, sql, supervise
):
    pool = WorkerPool(db_url)
    pool.queue("work")
    pool.task(queue="work", name="stuck", timeout=0.3, max_attempts=3)(lambda job: None)
    pool.task(queue="work", name="nap", max_attempts=10)(lambda job: None)
    try:
        stuck_id = pool.enqueue("stuck", {})
        run = supervise(db_url, RUNTIME_RECYCLE_GRACE="0.5")
        wait_until(
            lambda: run.lines("child_exited", "worker=work", "status=exit:75"),
            30,
            message="the child exits for recycling",
        )
        wait_until(
            lambda: len(run.lines("child_started", "worker=work")) == 2,
            15,
            message="the supervisor starts a replacement",
        )
        nap_id = pool.enqueue("nap", {"seconds": 0})
        wait_until(
            lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", nap_id) == [("done",)],
            15,
            message="the replacement runs new work",
        )
        state, errors = sql("SELECT state, errors FROM workerpool_jobs WHERE id = %s", stuck_id)[0]
        assert state == "failed" and [e["type"] for e in errors] == ["TimeoutError"]
        assert run.proc.poll() is None
    finally:
        pool.dispose()
