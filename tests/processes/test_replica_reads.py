"""Reads that leave the primary (`read_url` / `$WORKERPOOL_READ_URL`) on a real streaming standby.

Each test module run builds a primary and a streaming standby (initdb, pg_basebackup, as the
chaos tool does: :mod:`workerpool.chaos.cluster`). With the standby's replay paused the two
differ, so what a reader shows says where it read: `workerpool status`, the dashboard (a real
`workerpool web` in headless Chromium) and the maintenance duties' depth sample read the
standby and show its lag, while enqueue, cancel and pause still write to the primary (the
standby would refuse them). A standby that is down is named in one line, never replaced by
the primary.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.apps import web
from tests.helpers.cli import run_cli
from tests.helpers.db import libpq
from tests.helpers.waiting import wait_until
from tests.helpers.web import served
from workerpool import WorkerPool
from workerpool.chaos.cluster import Cluster, stop_quietly, workspace
from workerpool.model import metrics
from workerpool.process import settings
from workerpool.runtime.maintenance import Maintenance
from workerpool.sql import db

DATABASE = "app"


@dataclass
class Servers:
    primary: Cluster
    standby: Cluster

    @property
    def write_url(self) -> URL:
        return self.primary.url(DATABASE)

    @property
    def read_url(self) -> URL:
        return self.standby.url(DATABASE)


def run(url: URL, statement: str, *params: object) -> list[tuple]:
    with psycopg.connect(libpq(url), autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def count(url: URL, state: str = "pending") -> int:
    return run(url, "SELECT count(*) FROM workerpool_jobs WHERE state = %s", state)[0][0]


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with workspace() as root:
        primary, standby = Cluster(root, "primary"), Cluster(root, "standby")
        try:
            primary.initdb()
            primary.start()
            run(primary.url(), f"CREATE DATABASE {DATABASE}")
            WorkerPool(primary.url(DATABASE)).migrate()
            primary.base_backup_into(standby)
            standby.start()
            yield Servers(primary, standby)
        finally:
            stop_quietly(standby)
            stop_quietly(primary)


@pytest.fixture
def fresh(servers: Servers) -> Iterator[Servers]:
    """No jobs, the standby replaying and caught up, running."""
    if not servers.standby.running():
        servers.standby.start()
    run(servers.read_url, "SELECT pg_wal_replay_resume()")
    run(servers.write_url, "TRUNCATE workerpool_jobs, workerpool_queues")
    caught_up(servers)
    yield servers


def caught_up(servers: Servers) -> None:
    target = run(servers.write_url, "SELECT pg_current_wal_lsn()::text")[0][0]
    wait_until(
        lambda: run(servers.read_url, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", target)[0][
            0
        ],
        30,
        message="the standby caught up",
    )


def paused(servers: Servers) -> None:
    """Replay paused: what the primary writes from now on is not on the standby."""
    run(servers.read_url, "SELECT pg_wal_replay_pause()")
    wait_until(
        lambda: run(servers.read_url, "SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused",
        10,
        message="replay paused",
    )


def reading_app(servers: Servers, monkeypatch) -> WorkerPool:
    """The dashboard's application with ``$WORKERPOOL_READ_URL`` on the standby."""
    monkeypatch.setenv(
        settings.READ_URL_ENV, servers.read_url.render_as_string(hide_password=False)
    )
    return web.build(servers.write_url)


def cli(servers: Servers, tmp_path: Path, *args: str):
    return run_cli(
        *args,
        url=servers.write_url,
        cwd=tmp_path,
        extra_env={settings.READ_URL_ENV: servers.read_url.render_as_string(hide_password=False)},
    )


def test_status_reads_the_standby_and_shows_its_lag(fresh, tmp_path):
    pool = WorkerPool(fresh.write_url, read_url=fresh.read_url)
    pool.queue("email")
    pool.task(queue="email", name="ok")(lambda job: None)
    for _ in range(3):
        pool.enqueue("ok", {})
    caught_up(fresh)
    paused(fresh)
    for _ in range(2):
        pool.enqueue("ok", {})  # on the primary only
    assert (count(fresh.write_url), count(fresh.read_url)) == (5, 3)

    shown = cli(fresh, tmp_path, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["queues"]["email"]["counts"]["pending"] == 3  # the standby's rows
    assert data["replica"]["lag_seconds"] > 0  # commits it has received and not replayed
    text = cli(fresh, tmp_path, "status")
    assert "(read from a replica, " in text.stdout.splitlines()[0], text.stdout
    assert "s behind the primary)" in text.stdout.splitlines()[0]

    plain = run_cli("status", "--json", url=fresh.write_url, cwd=tmp_path)
    assert json.loads(plain.stdout)["replica"] is None  # no read URL: the primary, no lag
    assert json.loads(plain.stdout)["queues"]["email"]["counts"]["pending"] == 5
    pool.dispose()


def test_writes_and_actions_go_to_the_primary_only(fresh, tmp_path):
    pool = WorkerPool(fresh.write_url, read_url=fresh.read_url)
    pool.queue("email")
    pool.task(queue="email", name="ok")(lambda job: None)
    paused(fresh)
    job_id = pool.enqueue("ok", {})
    assert count(fresh.write_url) == 1 and count(fresh.read_url) == 0

    cancelled = cli(fresh, tmp_path, "cancel", str(job_id))
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stdout
    assert cli(fresh, tmp_path, "pause", "email").returncode == 0
    assert count(fresh.write_url, "cancelled") == 1
    assert run(fresh.write_url, "SELECT paused FROM workerpool_queues WHERE queue = 'email'") == [
        (True,)
    ]
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        run(fresh.read_url, "UPDATE workerpool_queues SET paused = false")
    with pool.read_engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT pg_is_in_recovery()").scalar() is True
    with pool.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT pg_is_in_recovery()").scalar() is False
    pool.dispose()


def test_the_dashboard_reads_the_standby_and_shows_its_lag(fresh, tmp_path, browser):
    from selenium.webdriver.common.by import By

    producer = web.build(fresh.write_url)
    paused(fresh)
    ids = [producer.enqueue("ok", {}) for _ in range(4)]  # on the primary only
    read = fresh.read_url.render_as_string(hide_password=False)
    with served(fresh.write_url, tmp_path / "web.log", env={settings.READ_URL_ENV: read}) as base:
        browser.get(f"{base}/")
        lag = browser.find_element(By.ID, "replica-lag").text
        assert lag.startswith("Read from a replica, ") and "behind the primary" in lag, lag
        browser.get(f"{base}/jobs/{ids[0]}")  # on the primary, not yet on the standby
        assert browser.find_element(By.ID, "error").text == f"no job has id {ids[0]}"
        run(fresh.read_url, "SELECT pg_wal_replay_resume()")
        caught_up(fresh)
        browser.get(f"{base}/jobs/{ids[0]}")
        assert browser.find_element(By.ID, "job-state").text == "pending"
    producer.dispose()


def test_the_depth_sample_reads_the_standby(fresh, monkeypatch):
    seen = []

    class Capture(metrics.Null):
        enabled = True

        def depth(self, samples):
            seen.append(samples)

    pool = web.build(fresh.write_url)
    paused(fresh)
    pool.enqueue("ok", {})
    monkeypatch.setattr(metrics, "record", Capture())
    reads = db.create(fresh.read_url)
    maintenance = Maintenance(pool.registry, pool.engine, worker_id="m", read_engine=reads)
    try:
        maintenance.run_pass()
        assert seen[-1]["email"]["queued"] == 0  # the standby has not replayed the enqueue
    finally:
        maintenance.close()
        reads.dispose()
        pool.dispose()


def test_a_standby_that_is_down_is_named_and_writes_go_on(fresh, tmp_path, monkeypatch, caplog):
    pool = web.build(fresh.write_url)
    job_id = pool.enqueue("ok", {})
    fresh.standby.stop()

    shown = cli(fresh, tmp_path, "status")
    assert shown.returncode != 0
    line = shown.stderr.strip()
    assert len(line.splitlines()) == 1 and "the read replica" in line and "failed" in line, line
    assert "fall back" in line

    cancelled = cli(fresh, tmp_path, "cancel", str(job_id))
    assert cancelled.returncode == 0, cancelled.stderr

    from tests.helpers.web import client

    reading = reading_app(fresh, monkeypatch)
    with client(reading) as http:
        page = http.get("/")
    assert page.status_code == 503 and "the read replica" in page.text

    class Capture(metrics.Null):
        enabled = True

    monkeypatch.setattr(metrics, "record", Capture())
    maintenance = Maintenance(
        pool.registry, pool.engine, worker_id="m", read_engine=reading.read_engine
    )
    with caplog.at_level(logging.WARNING, logger="workerpool.maintenance"):
        maintenance.run_pass()  # the duties on the primary go on
    assert any(getattr(r, "event", None) == "replica_sample_failed" for r in caplog.records)
    maintenance.close()
    reading.dispose()
    pool.dispose()
