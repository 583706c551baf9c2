"""The maintenance pass in-process on real PostgreSQL: sweep, pruning, workers, dead reports."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from tests.helpers.waiting import wait_until
from workerpool import ConfigError, WorkerPool
from workerpool import sql as queries
from workerpool.model.notices import DeadNotice, report_dead
from workerpool.process.settings import queue_settings
from workerpool.runtime.maintenance import MAINTENANCE_TYPE, Maintenance


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q", stale_after=300)

    @pool.task(queue="q")
    def work(job):
        pass

    return pool


def leased(sql, *, attempts: int, max_attempts: int, age: str) -> int:
    """A row leased by a worker of its own that holds nothing else (a death is its own)."""
    return sql(
        "INSERT INTO workerpool_jobs (queue, task, state, attempts, max_attempts,"
        " claimed_by, claimed_at) VALUES ('q', 'work', 'processing', %s, %s,"
        " 'host:' || gen_random_uuid(), now() - %s::interval) RETURNING id",
        attempts,
        max_attempts,
        age,
    )[0][0]


def state_of(sql, job_id):
    return sql("SELECT state, dead_reason FROM workerpool_jobs WHERE id = %s", job_id)[0]


def test_sweep_dead_letters_stale_exhausted_leases_and_reports_each(app, sql, caplog, monkeypatch):
    exhausted_stale = leased(sql, attempts=3, max_attempts=3, age="10 minutes")
    exhausted_fresh = leased(sql, attempts=3, max_attempts=3, age="10 seconds")
    retryable_stale = leased(sql, attempts=1, max_attempts=3, age="10 minutes")  # claim's stale arm
    seen: list[DeadNotice] = []

    @app.on_dead
    def broken(notice):
        raise RuntimeError("pager down")

    app.on_dead(seen.append)
    maintenance = Maintenance(app.registry, app.engine, worker_id="maint-1")
    with caplog.at_level(logging.ERROR, logger="workerpool.dead"):
        maintenance.run_pass()
    assert state_of(sql, exhausted_stale) == ("dead", "abandoned")
    assert state_of(sql, exhausted_fresh) == ("processing", None)
    assert state_of(sql, retryable_stale) == ("processing", None)
    [error] = sql("SELECT errors FROM workerpool_jobs WHERE id = %s", exhausted_stale)[0]
    assert error[-1]["type"] == "WorkerLost" and error[-1]["alone"] is True

    [dead_line] = [r for r in caplog.records if getattr(r, "event", "") == "job_dead"]
    assert dead_line.getMessage() == (
        f"job dead: queue=q id={exhausted_stale} task=work attempts=3 reason=abandoned "
        f"last_error=WorkerLost: {error[-1]['message']}"
    )
    assert [r.event for r in caplog.records if r.name == "workerpool.dead"] == [
        "job_dead",
        "on_dead_hook_failed",
    ]  # a failing hook is logged, the next hook still runs
    assert [(n.id, n.reason, n.attempts) for n in seen] == [(exhausted_stale, "abandoned", 3)]

    # the env overrides the queue's 300 s: read once, with the run's settings
    monkeypatch.setenv("WORKER_CLAIM_STALE_MS", "5000")
    Maintenance(
        app.registry, app.engine, worker_id="maint-1", queues=queue_settings(app)
    ).run_pass()
    assert state_of(sql, exhausted_fresh) == ("dead", "abandoned")
    monkeypatch.setenv("WORKER_CLAIM_STALE_MS", "soon")
    with pytest.raises(ConfigError, match="WORKER_CLAIM_STALE_MS must be milliseconds"):
        queue_settings(app)


def test_pruning_deletes_old_done_and_cancelled_in_batches_and_keeps_dead_and_recent(app, sql):
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " SELECT 'q', 'work', 'done', now() - interval '8 days' FROM generate_series(1, 2500)"
    )
    keep = {
        "recent done": "'done', NULL, now() - interval '6 days'",
        "old dead": "'dead', 'exhausted', now() - interval '90 days'",
        "old pending": "'pending', NULL, NULL",
        "old failed": "'failed', NULL, NULL",
    }
    kept_ids = {}
    for label, values in keep.items():
        kept_ids[label] = sql(
            "INSERT INTO workerpool_jobs (queue, task, state, dead_reason,"
            f" finished_at, created_at) VALUES ('q', 'work', {values},"
            " now() - interval '30 days') RETURNING id"
        )[0][0]
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at)"
        " VALUES ('q', 'work', 'cancelled', now() - interval '7 days 1 minute')"
    )
    app.maintenance(prune_batch=1000, prune_batches_per_pass=2)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")

    assert maintenance.prune_finished() == 2000  # one pass is bounded: two batches
    assert maintenance.prune_finished() == 501  # the rest, cancelled included
    assert maintenance.prune_finished() == 0
    remaining = dict(sql("SELECT id, state FROM workerpool_jobs"))
    assert set(remaining) == set(kept_ids.values())


def test_a_tasks_result_ttl_keeps_its_finished_rows_longer_or_shorter(app, sql):
    @app.task(queue="q", result_ttl=timedelta(days=30))
    def report(job):
        return {"rows": 1}

    @app.task(queue="q", result_ttl=60)
    def ping(job):
        return None

    def finished(task: str, age: str) -> int:
        return sql(
            "INSERT INTO workerpool_jobs (queue, task, state, finished_at, result)"
            f" VALUES ('q', %s, 'done', now() - interval '{age}', '1') RETURNING id",
            task,
        )[0][0]

    old_work, old_report = finished("work", "8 days"), finished("report", "8 days")
    older_report, old_ping = finished("report", "31 days"), finished("ping", "2 minutes")
    recent_work = finished("work", "2 minutes")
    Maintenance(app.registry, app.engine, worker_id="m").prune_finished()
    assert {row[0] for row in sql("SELECT id FROM workerpool_jobs")} == {old_report, recent_work}
    assert app.job(old_report).result == 1  # read eight days on: past the default retention
    assert {old_work, older_report, old_ping}.isdisjoint(
        row[0] for row in sql("SELECT id FROM workerpool_jobs")
    )


@pytest.mark.parametrize("ttl", [0, -1, "1 day", float("inf"), True])
def test_a_bad_result_ttl_is_refused_by_name(app, ttl):
    with pytest.raises(ConfigError, match="result_ttl must be"):
        app.task(lambda job: None, name="t", queue="q", result_ttl=ttl)


def test_pruning_uses_the_finished_index(app, sql):
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, finished_at) SELECT 'q', 'work', 'done',"
        " now() - n * interval '1 minute' FROM generate_series(1, 20000) AS n"
    )
    sql("ANALYZE workerpool_jobs")
    with app.engine.connect() as conn:
        compiled = queries.prune_finished_statement(7 * 86400, 1000).compile(
            dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
        )
        rows = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).scalars()
        plan = "\n".join(rows)
    assert "ix_workerpool_jobs_finished" in plan and "Seq Scan" not in plan, plan


def test_workers_registry_registers_beats_and_prunes_the_stale(app, sql):
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, last_seen)"
        " VALUES ('h:1:old', 'h', 1, 'q', now() - interval '10 minutes'),"
        " ('h:2:new', 'h', 2, 'q', now() - interval '5 seconds')"
    )
    maintenance = Maintenance(app.registry, app.engine, worker_id="h:3:maint")
    maintenance.run_pass()
    rows = dict(sql("SELECT id, queue FROM workerpool_workers"))
    assert rows == {"h:2:new": "q", "h:3:maint": MAINTENANCE_TYPE}
    first_seen = sql("SELECT last_seen FROM workerpool_workers WHERE id = 'h:3:maint'")[0][0]
    sql("DELETE FROM workerpool_workers WHERE id = 'h:3:maint'")  # pruned by another replica
    maintenance.run_pass()
    assert sql(
        "SELECT last_seen >= %s FROM workerpool_workers WHERE id = 'h:3:maint'", first_seen
    ) == [(True,)]
    maintenance.close()
    assert dict(sql("SELECT id, queue FROM workerpool_workers")) == {"h:2:new": "q"}


def test_report_dead_accepts_the_worker_runtimes_rows(app, caplog):
    class Row:  # what the worker runtime has after fail()/kill() returned 'dead'
        id, queue, task, attempts = 7, "q", "work", 5

    seen = []
    app.on_dead(seen.append)
    with caplog.at_level(logging.ERROR, logger="workerpool.dead"):
        report_dead(
            app.on_dead,
            [Row()],
            reason="exhausted",
            error={"type": "ConnectionError", "message": "provider 503\nretry later"},
        )
    assert caplog.records[0].getMessage() == (
        "job dead: queue=q id=7 task=work attempts=5 reason=exhausted "
        "last_error=ConnectionError: provider 503\\nretry later"
    )  # still one line
    assert seen == [
        DeadNotice(
            7,
            "q",
            "work",
            5,
            "exhausted",
            {"type": "ConnectionError", "message": "provider 503\nretry later"},
        )
    ]
    with pytest.raises(ConfigError, match="on_dead hook must be callable"):
        app.on_dead("not a function")


def test_the_worker_runtime_reports_its_dead_jobs_through_on_dead(app, sql, caplog):
    from tests.helpers.workers import running
    from workerpool import Permanent

    seen: list[DeadNotice] = []
    app.on_dead(seen.append)

    @app.task(queue="q", max_attempts=3)
    def refuse(job):
        raise Permanent("422: no such mailbox")

    job_id = app.enqueue("refuse", {})
    with caplog.at_level(logging.ERROR, logger="workerpool.dead"), running(app, "q"):
        wait_until(lambda: seen, 20, message="the on_dead hook")
    [notice] = seen
    assert (notice.id, notice.queue, notice.task, notice.attempts, notice.reason) == (
        job_id,
        "q",
        "refuse",
        1,
        "permanent",
    )
    assert [r.getMessage() for r in caplog.records if r.name == "workerpool.dead"] == [
        f"job dead: queue=q id={job_id} task=refuse attempts=1 reason=permanent "
        "last_error=Permanent: 422: no such mailbox"
    ]


def test_workers_beat_well_within_the_window_status_calls_live(app):
    from workerpool.model.states import LIVE_WORKER_WINDOW
    from workerpool.runtime.worker import Worker

    assert (
        app.registry.queue_spec("q").stale_after == 300
    )  # leases renewed every 100 s would be too rare
    assert Worker(app.registry, app.url, "q").renew_every <= LIVE_WORKER_WINDOW / 6
    assert app.registry.maintenance_settings.worker_ttl >= 2 * LIVE_WORKER_WINDOW


def test_a_failing_duty_is_logged_by_name_and_skips_none_of_the_others(app, sql, caplog):
    """The history duty fails on every pass (its owner's function is gone): the duties after it
    still run, and the failure is logged once with the duty's name and the database's answer."""
    sql(
        "ALTER FUNCTION workerpool_history_create_partition(timestamptz, timestamptz)"
        " RENAME TO moved_away"
    )
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, last_seen)"
        " VALUES ('gone', 'h', 1, 'q', now() - interval '1 hour')"
    )
    sql(
        "INSERT INTO workerpool_audit (at, actor, source, action, target)"
        " VALUES (now() - interval '100 days', 'old', 'cli', 'pause', 'q')"
    )
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    with caplog.at_level(logging.INFO, logger="workerpool.maintenance"):
        maintenance.run_pass()
        maintenance.run_pass()
    assert sql("SELECT id FROM workerpool_workers WHERE id = 'gone'") == []
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 0
    [failed] = [r for r in caplog.records if getattr(r, "event", "") == "duty_failed"]
    assert failed.duty == "history" and "workerpool_history_create_partition" in failed.cause
    sql(
        "ALTER FUNCTION moved_away(timestamptz, timestamptz)"
        " RENAME TO workerpool_history_create_partition"
    )
    with caplog.at_level(logging.INFO, logger="workerpool.maintenance"):
        maintenance.run_pass()
    assert [r.duty for r in caplog.records if getattr(r, "event", "") == "duty_recovered"] == [
        "history"
    ]
