"""Effects that happen once under real `workerpool run` supervisors: hundreds of jobs writing
their effect with ``complete_in`` through a SIGKILL storm and a PostgreSQL restart (a cluster of
the test's own) leave every effect exactly once; a
worker frozen past ``stale_after`` while another finishes its job cannot commit its effect when
it resumes; a step recorded with ``conn=`` is not repeated after a kill."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.apps import once as app_module
from tests.helpers.db import libpq
from tests.helpers.processes import alive, start_supervisor, supervisors
from tests.helpers.waiting import wait_until
from workerpool.chaos.cluster import Cluster, stop_quietly, workspace
from workerpool.migrate import upgrade

APP = app_module  # the app the shared app and supervise fixtures build (conftest)
APP_TABLES = app_module.TABLES  # made by the app fixture


def effects(sql) -> dict[int, int]:
    """``{job_id: ledger rows}`` of every job that wrote its effect."""
    return dict(sql("SELECT job_id, count(*) FROM once_ledger GROUP BY job_id"))


def states(sql) -> dict[str, int]:
    return dict(sql("SELECT state, count(*) FROM workerpool_jobs GROUP BY state"))


@pytest.fixture
def own_server(tmp_path) -> Iterator[tuple[Cluster, Callable[..., list[tuple]]]]:
    """A PostgreSQL cluster of this test's own (never the shared server: it is restarted),
    migrated, with the app's tables; and a ``sql`` on it that reconnects after a restart."""
    with workspace() as root:
        cluster = Cluster(root, "primary")
        cluster.initdb()
        cluster.start()
        try:
            upgrade(cluster.url())
            conn: list[psycopg.Connection] = []

            def sql(statement: str, *params: object) -> list[tuple]:
                if not conn or conn[0].closed or conn[0].broken:
                    if conn:
                        conn[0].close()  # broken by a restart: closed, not left to the collector
                    conn[:] = [psycopg.connect(libpq(cluster.url()), autocommit=True)]
                cursor = conn[0].execute(statement, params or None)  # type: ignore[arg-type]
                return cursor.fetchall() if cursor.description else []

            for table in app_module.TABLES:
                sql(table)
            yield cluster, sql
            if conn:
                conn[0].close()
        finally:
            stop_quietly(cluster)


def done_count(sql) -> int:
    """Jobs done so far; 0 while the server is down."""
    try:
        return states(sql).get("done", 0)
    except psycopg.OperationalError:
        return 0


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_sigkill_storm_and_a_postgres_restart_leave_every_effect_exactly_once(
    own_server, tmp_path
):
    cluster, sql = own_server
    url = cluster.url()
    pool = app_module.build(url)
    try:
        ids = pool.enqueue_many([("charge", {}) for _ in range(300)])
    finally:
        pool.dispose()
    with supervisors("tests.apps.once:pool", url, tmp_path) as launch:
        sup = launch()
        sup.wait_running("once")
        kills = restarts = 0
        deadline = time.monotonic() + 90
        while done_count(sql) < 250 and time.monotonic() < deadline:
            pid, done = sup.child_pid("once"), done_count(sql)
            # a child that never progressed is a boot failure to the supervisor: let it work
            wait_until(lambda done=done: done_count(sql) > done, 60, message="progress")
            time.sleep(random.uniform(0.0, 0.2))
            if not restarts and done_count(sql) > 100:
                cluster.restart("immediate")  # every connection cut, mid-transaction
                restarts += 1
                continue
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
                kills += 1
            wait_until(lambda pid=pid: not alive(pid), 30, message="the killed child reaped")
            sup.wait_running("once")
        wait_until(
            lambda: done_count(sql) == 300,
            180,
            message=f"every job done: {states(sql)}\n{sup.log()[-3000:]}",
        )
    assert kills >= 3 and restarts == 1, "the storm must actually kill, and restart"
    ledger = effects(sql)
    assert sorted(ledger) == sorted(ids), "an effect is missing"
    assert {job: n for job, n in ledger.items() if n != 1} == {}, "an effect was doubled"
    # each job's result was written by the transaction that wrote its effect
    wrong = sql(
        "SELECT j.id FROM workerpool_jobs j JOIN once_ledger l ON l.job_id = j.id"
        " WHERE j.result <> jsonb_build_object('charged', j.id) OR j.attempts <> l.attempt"
    )
    assert wrong == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_frozen_past_stale_after_cannot_commit_its_effect_when_it_resumes(
    app, sql, db_url, tmp_path
):
    # the frozen supervisor must not kill its own child for a hang once it resumes
    env = {"WORKER_CLAIM_STALE_MS": "3000", "ONCE_NAP": "5", "TEST_HANG": "120"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    job_id = app.enqueue("slow_charge", {})
    first = start_supervisor("tests.apps.once:pool", db_url, tmp_path / "a", **env)
    second = None
    try:
        first.wait_running("once")
        wait_until(lambda: sql("SELECT attempt FROM once_started") == [(1,)], 30, message="run 1")
        os.killpg(first.pid, signal.SIGSTOP)  # the whole supervisor: nobody renews, nobody kills
        second = start_supervisor("tests.apps.once:pool", db_url, tmp_path / "b", **env)
        wait_until(
            lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
            60,
            message=f"the job finished by the second supervisor\n{second.log()[-3000:]}",
        )
        os.killpg(first.pid, signal.SIGCONT)
        refused = wait_until(
            lambda: sql("SELECT attempt, error FROM once_refused"),
            30,
            message=f"the resumed handler refused\n{first.log()[-3000:]}",
        )
        assert refused == [
            (
                1,
                f"CompletionLeaseLost: job {job_id}: lease lost, not completed"
                " (now done); roll back the effect",
            )
        ]
        assert sql("SELECT attempt FROM once_ledger WHERE job_id = %s", job_id) == [(2,)]
        assert sql("SELECT result FROM workerpool_jobs WHERE id = %s", job_id) == [
            ({"attempt": 2},)
        ]
    finally:
        for sup in (first, second):
            if sup is not None:
                os.killpg(sup.pid, signal.SIGCONT)
                os.killpg(sup.pid, signal.SIGKILL)
                sup.proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_step_recorded_with_conn_is_not_repeated_after_a_kill(app, sql, supervise):
    job_id = app.enqueue("debit", {})
    sup = supervise()
    sup.wait_running("once")
    wait_until(
        lambda: (
            sql("SELECT steps ? 'debit' FROM workerpool_jobs WHERE id = %s", job_id) == [(True,)]
        ),
        30,
        message="the step recorded",
    )
    pid = sup.child_pid("once")
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
        60,
        message=f"the job done\n{sup.log()[-3000:]}",
    )
    assert sql("SELECT attempt FROM once_ledger WHERE job_id = %s", job_id) == [(1,)]
    assert sql("SELECT attempts FROM workerpool_jobs WHERE id = %s", job_id) == [(2,)]
