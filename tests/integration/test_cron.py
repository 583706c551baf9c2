"""Cron in-process against real PostgreSQL: tick math, once per tick, overlap, missed-run policies.

Time travel is done on the schedule row (``next_tick``) with the database clock, never by
sleeping: a test moves a schedule's next tick into the past and runs a pass.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.waiting import wait_until
from workerpool import ConfigError, WorkerPool, testing
from workerpool.model.specs import CronSpec
from workerpool.runtime.maintenance import Maintenance
from workerpool.runtime.maintenance.cron import (
    MISSED_GRACE,
    latest_tick_until,
    next_tick_after,
    tick_key,
)


def spec(expression: str, timezone: str = "UTC", **kw) -> CronSpec:
    return CronSpec("c", expression, "q", timezone=timezone, **kw)


# -- configuration: refused with one clear line -------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "options", "message"),
    [
        ("every hour", {}, "cron sweep: bad expression 'every hour'"),
        ("61 * * * *", {}, "bad expression '61 * * * *'"),
        ("0 0 31 2 *", {}, "bad expression '0 0 31 2 *'"),  # valid fields, never fires
        ("", {}, "expression must be a non-empty string"),
        ("0 * * * *", {"timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ("0 * * * *", {"overlap": "queue"}, "overlap must be one of skip, allow"),
        ("0 * * * *", {"missed": "all"}, "missed must be one of run_once, skip"),
        ("0 * * * *", {"retries": 3}, "unknown option(s) ['retries']"),
        ("0 * * * *", {"name": "bad name!"}, "cron name 'bad name!' is invalid"),
    ],
)
def test_bad_cron_input_is_refused_at_decoration(expression, options, message):
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigError) as caught:
        pool.cron(expression, queue="ops", **options)(sweep)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert pool.crons == {} and pool.tasks == {}  # nothing half-registered


def sweep(job):
    pass


def test_duplicate_name_and_unknown_queue_are_refused():
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.cron("0 * * * *", queue="ops")(sweep)
    with pytest.raises(ConfigError, match="cron 'sweep' is declared twice"):
        pool.cron("*/5 * * * *", queue="ops")(sweep)

    @pool.task(queue="ops")
    def report(job):
        pass

    with pytest.raises(ConfigError, match="a task of that name exists"):
        pool.cron("0 * * * *", queue="ops")(report)
    with pytest.raises(ConfigError, match=r"not bare @pool\.cron"):
        pool.cron(sweep)
    # 'ops' was declared by the task above; 'typo' never was: refused at start, not at decoration
    pool.cron("0 * * * *", queue="typo", name="other")(sweep)
    with pytest.raises(ConfigError, match=r"cron 'other': queue 'typo' is not declared"):
        Maintenance(pool.registry, pool.engine, worker_id="w")
    pool.queue("typo")
    Maintenance(pool.registry, pool.engine, worker_id="w")


def test_the_decorated_function_is_an_ordinary_task():
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.queue("ops")
    fn = pool.cron("0 * * * *", queue="ops", name="hourly", max_attempts=2, timeout=30)(sweep)
    assert fn is sweep
    task = pool.registry.task_spec("hourly")
    assert (task.queue, task.max_attempts, task.timeout, task.fn) == ("ops", 2, 30, sweep)
    assert pool.crons["hourly"] == CronSpec("hourly", "0 * * * *", "ops")


def test_without_queue_a_cron_runs_on_default_as_a_task_does():
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none")
    pool.cron("0 * * * *")(sweep)
    assert pool.registry.task_spec("sweep").queue == "default" and "default" in pool.queues
    pool.registry.validate_crons()  # declared with default settings, as @pool.task declares it


# -- tick math ------------------------------------------------------------------------------------


def test_ticks_follow_the_schedule_timezone_across_dst():
    paris = spec("0 9 * * *", timezone="Europe/Paris")
    before_dst = datetime(2024, 3, 30, 12, 0, tzinfo=UTC)  # CET, UTC+1
    assert next_tick_after(paris, before_dst) == datetime(2024, 3, 31, 7, 0, tzinfo=UTC)  # CEST
    assert latest_tick_until(paris, before_dst) == datetime(2024, 3, 30, 8, 0, tzinfo=UTC)


def test_latest_tick_includes_an_exact_tick_and_seconds_field_works():
    hourly = spec("0 * * * *")
    on_tick = datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
    assert latest_tick_until(hourly, on_tick) == on_tick
    assert next_tick_after(hourly, on_tick) == on_tick + timedelta(hours=1)
    every_10s = spec("* * * * * */10")
    later = on_tick + timedelta(seconds=1)
    assert next_tick_after(every_10s, later) == on_tick + timedelta(seconds=10)
    assert tick_key("c", on_tick) == "cron:c:2024-01-01T10:00:00+00:00"


# -- scheduling against PostgreSQL --------------------------------------------------------------


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")
    return pool


def cron_row(sql, name="c"):
    return sql(
        "SELECT last_tick, next_tick, last_job_id, skipped FROM workerpool_cron WHERE name = %s",
        name,
    )[0]


def jobs_of(sql):
    return sql("SELECT id, key, state, payload FROM workerpool_jobs ORDER BY id")


def make_due(sql, name="c"):
    """Wait (≤ 1 s) until the schedule's next tick has come on the database clock."""
    wait_until(
        lambda: sql("SELECT next_tick <= now() FROM workerpool_cron WHERE name = %s", name)[0][0],
        timeout=3,
        message="the next tick",
    )


def test_first_pass_schedules_from_now_then_each_tick_becomes_one_job(app, sql):
    ran = []
    app.cron("* * * * * *", queue="q", name="c")(lambda job: ran.append(job.payload["tick"]))
    maintenance = Maintenance(app.registry, app.engine, worker_id="m1")
    before = sql("SELECT now() - interval '1 second'")[0][0]  # the clock before the pass, not after
    maintenance.run_pass()
    last_tick, next_tick, last_job, skipped = cron_row(sql)
    assert (last_tick, last_job, skipped) == (None, None, 0)  # first sight: nothing fires
    assert next_tick > before
    assert jobs_of(sql) == []

    make_due(sql)
    maintenance.run_pass()
    maintenance.run_pass()  # the same tick (or a later one while the first is pending): no job
    [(job_id, key, _state, payload)] = jobs_of(sql)
    tick, following, last_job, _ = cron_row(sql)
    assert tick >= next_tick and last_job == job_id
    assert key == tick_key("c", tick) and payload == {"tick": tick.astimezone(UTC).isoformat()}
    assert following == tick + timedelta(seconds=1) or cron_row(sql)[3] == 1
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert ran == [payload["tick"]]


def test_replicas_racing_on_the_same_ticks_enqueue_each_once(app, db_url, sql):
    app.cron("* * * * * *", queue="q", name="c", overlap="allow")(sweep)
    replicas = []
    for n in range(3):
        other = WorkerPool(db_url)
        other.queue("q")
        other.cron("* * * * * *", queue="q", name="c", overlap="allow")(sweep)
        replicas.append(Maintenance(other.registry, other.engine, worker_id=f"m{n}"))
    replicas[0].run_pass()
    barrier = threading.Barrier(3)

    def race(m: Maintenance) -> None:
        for _ in range(4):
            barrier.wait()
            m.schedule_crons()
            make_due(sql)

    threads = [threading.Thread(target=race, args=(m,)) for m in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ticks = [row[3]["tick"] for row in jobs_of(sql)]
    assert len(ticks) >= 2 and len(ticks) == len(set(ticks))  # one job per tick
    assert cron_row(sql)[0].astimezone(UTC).isoformat() == max(ticks)
    for m in replicas:
        m.engine.dispose()


def test_overlap_skip_counts_and_logs_a_skipped_tick(app, sql, caplog):
    app.cron("* * * * * *", queue="q", name="c")(sweep)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    maintenance.run_pass()
    make_due(sql)
    maintenance.run_pass()
    [(first, *_)] = jobs_of(sql)
    make_due(sql)
    with caplog.at_level(logging.WARNING, logger="workerpool.cron"):
        maintenance.run_pass()  # the first run is still pending: skip
    assert [row[0] for row in jobs_of(sql)] == [first]
    assert cron_row(sql)[2:] == (first, 1)
    skipped = [r for r in caplog.records if getattr(r, "event", "") == "cron_tick_skipped"]
    assert len(skipped) == 1 and skipped[0].previous_job == first
    testing.drain(app, "q")
    make_due(sql)
    maintenance.run_pass()  # previous run done: the next tick runs
    assert len(jobs_of(sql)) == 2 and cron_row(sql)[3] == 1


def test_overlap_allow_enqueues_while_the_previous_run_is_pending(app, sql):
    app.cron("* * * * * *", queue="q", name="c", overlap="allow")(sweep)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    maintenance.run_pass()
    for _ in range(2):
        make_due(sql)
        maintenance.run_pass()
    assert [row[2] for row in jobs_of(sql)] == ["pending", "pending"]
    assert cron_row(sql)[3] == 0


def daily_three_hours_ago(sql) -> tuple[str, datetime]:
    """A daily expression whose latest tick was ~3 h ago (so it is late by any grace)."""
    tick = sql("SELECT date_trunc('minute', now() - interval '3 hours')")[0][0].astimezone(UTC)
    return f"{tick.minute} {tick.hour} * * *", tick


@pytest.mark.parametrize("missed", ["run_once", "skip"])
def test_after_downtime_run_once_runs_one_catch_up_and_skip_runs_none(app, sql, missed, caplog):
    expression, latest = daily_three_hours_ago(sql)
    app.cron(expression, queue="q", name="c", missed=missed)(sweep)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    maintenance.run_pass()
    assert cron_row(sql)[1] == latest + timedelta(days=1)
    # the schedulers were down for three days: the next tick the row knows is 3 days old
    sql("UPDATE workerpool_cron SET next_tick = next_tick - interval '4 days'")
    with caplog.at_level(logging.INFO, logger="workerpool.cron"):
        maintenance.run_pass()
        maintenance.run_pass()
    last_tick, next_tick, last_job, skipped = cron_row(sql)
    assert (last_tick, next_tick, skipped) == (latest, latest + timedelta(days=1), 0)
    events = [getattr(r, "event", "") for r in caplog.records if r.name == "workerpool.cron"]
    if missed == "run_once":
        [(job_id, key, _, _)] = jobs_of(sql)  # exactly one catch-up, for the latest missed tick
        assert key == tick_key("c", latest) and last_job == job_id
        assert events == ["cron_catch_up"]
    else:
        assert jobs_of(sql) == [] and last_job is None
        assert events == ["cron_ticks_missed"]
    assert MISSED_GRACE < timedelta(hours=3)


def test_changing_the_expression_reschedules_from_now(app, sql, db_url):
    app.cron("* * * * * *", queue="q", name="c")(sweep)
    Maintenance(app.registry, app.engine, worker_id="m").run_pass()
    changed = WorkerPool(db_url)
    changed.queue("q")
    changed.cron("0 0 1 1 *", queue="q", name="c", timezone="Asia/Tokyo")(sweep)
    Maintenance(changed.registry, changed.engine, worker_id="m2").run_pass()
    expression, timezone, next_tick = sql(
        "SELECT expression, timezone, next_tick FROM workerpool_cron"
    )[0]
    assert (expression, timezone) == ("0 0 1 1 *", "Asia/Tokyo")
    next_tick = next_tick.astimezone(UTC)
    assert (next_tick.month, next_tick.day, next_tick.hour) == (12, 31, 15)  # Jan 1 00:00 JST
    changed.dispose()


def test_a_failing_schedule_does_not_stop_the_others(app, sql, caplog):
    app.cron("* * * * * *", queue="q", name="a")(sweep)
    app.cron("* * * * * *", queue="q", name="b")(sweep)
    maintenance = Maintenance(app.registry, app.engine, worker_id="m")
    maintenance.run_pass()
    del app.tasks["b"]  # b's enqueue now fails (UnknownTask); a must still be scheduled
    make_due(sql, "a")
    make_due(sql, "b")
    with caplog.at_level(logging.ERROR, logger="workerpool.cron"):
        maintenance.run_pass()
    assert cron_row(sql, "a")[2] is not None
    assert cron_row(sql, "b")[0] is None
    assert [getattr(r, "event", "") for r in caplog.records] == ["cron_failed"]


@pytest.mark.slow  # the CLI as a subprocess, twice
def test_run_and_the_maintenance_loop_refuse_a_cron_on_an_undeclared_queue(db_url, tmp_path):
    (tmp_path / "badcron.py").write_text(
        "from workerpool import WorkerPool\n"
        "pool = WorkerPool()\n"
        "pool.queue('email', drain_timeout=1)\n"
        "@pool.cron('0 * * * *', queue='reports')\n"
        "def weekly_report(job):\n"
        "    pass\n"
    )
    heartbeats = tmp_path / "hb"
    heartbeats.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(
        WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False), PYTHONPATH=str(ROOT)
    )
    expected = "cron 'weekly_report': queue 'reports' is not declared (declared: ['email'])"
    run = ["run", "badcron:pool", "--heartbeat-dir", str(heartbeats)]
    for module, args in (("workerpool", run), ("workerpool.maintenance", ["badcron:pool"])):
        out = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 1 and expected in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
