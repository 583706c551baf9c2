"""Cron schedules added and removed at run time against real PostgreSQL: ``pool.cron_add``
writes a row every scheduler pass reads (no restart), its ticks enqueue its task once per tick
across schedulers, the same name again changes it, ``cron_remove`` stops it; a name declared in
code, a bad expression, timezone, queue, task or payload are refused by name with nothing
written; each change is in the audit trail; the command line does the same.

Time travel is done on the schedule row (``next_tick``) with the database clock, as in
test_cron.py."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli
from workerpool import ConfigError, PayloadError, UnknownTask, WorkerPool
from workerpool.model.errors import CronDeclared, UnknownCron
from workerpool.runtime.maintenance import Maintenance


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")

    @pool.task(queue="q")
    def digest(job):
        return job.payload

    @pool.cron("0 * * * *", queue="q")
    def hourly(job):
        return None

    return pool


EVERY = "digest"


def scheduler(app: WorkerPool, worker_id: str = "m") -> Maintenance:
    return Maintenance(app.registry, app.engine, worker_id=worker_id)


def due_now(sql, name: str) -> None:
    """The schedule's next tick moved a minute into the past (its tick is due)."""
    sql(
        "UPDATE workerpool_cron SET next_tick = date_trunc('minute', now()) - interval '1 minute'"
        " WHERE name = %s",
        name,
    )


def jobs(sql) -> list[tuple]:
    return sql("SELECT task, payload - 'tick', key LIKE 'cron:digest:%%' FROM workerpool_jobs")


def test_an_added_schedule_fires_its_task_once_per_tick_across_schedulers(app, sql):
    app.cron_add("digest", "* * * * *", task="digest", payload={"kind": "short"})
    first, second = scheduler(app, "a"), scheduler(app, "b")
    first.schedule_crons()  # picked up by a running scheduler, no restart: starts from now
    assert sql("SELECT next_tick > now() FROM workerpool_cron WHERE name = 'digest'") == [(True,)]
    due_now(sql, "digest")
    first.schedule_crons()
    second.schedule_crons()  # the same tick again: nothing more
    assert jobs(sql) == [("digest", {"kind": "short"}, True)]


def test_the_same_name_again_changes_the_expression(app, sql):
    app.cron_add("digest", "* * * * *", task="digest")
    scheduler(app).schedule_crons()
    app.cron_add("digest", "0 0 * * *", task="digest", timezone="Europe/Paris")
    changed = "SELECT expression, timezone, next_tick FROM workerpool_cron WHERE name = 'digest'"
    assert sql(changed) == [("0 0 * * *", "Europe/Paris", None)]
    scheduler(app).schedule_crons()
    local = "extract(hour FROM next_tick AT TIME ZONE 'Europe/Paris')"
    assert sql(f"SELECT {local} FROM workerpool_cron WHERE name = 'digest'") == [(0,)]


def test_a_removed_schedule_stops(app, sql):
    app.cron_add("digest", "* * * * *", task="digest")
    scheduler(app).schedule_crons()
    due_now(sql, "digest")
    app.cron_remove("digest")
    scheduler(app).schedule_crons()
    assert jobs(sql) == []
    assert sql("SELECT name FROM workerpool_cron ORDER BY name") == [("hourly",)]


def test_each_change_is_in_the_audit_trail(app, sql):
    app.cron_add("digest", "* * * * *", task="digest", by="ada")
    app.cron_remove("digest", by="grace")
    assert sql("SELECT actor, action, target FROM workerpool_audit ORDER BY id") == [
        ("ada", "cron_add", "cron:digest"),
        ("grace", "cron_remove", "cron:digest"),
    ]


def test_a_name_declared_in_code_cannot_be_added_or_removed(app, sql):
    scheduler(app).schedule_crons()  # its row exists
    before = sql("SELECT * FROM workerpool_cron")
    with pytest.raises(CronDeclared, match="declared in code"):
        app.cron_add("hourly", "* * * * *", task="digest")
    with pytest.raises(CronDeclared):
        app.cron_remove("hourly")
    other = WorkerPool(app.url)  # an app that does not declare it: the row says so
    other.queue("q")
    other.task(queue="q", name="digest")(lambda job: None)
    try:
        with pytest.raises(CronDeclared):
            other.cron_add("hourly", "* * * * *", task="digest")
    finally:
        other.dispose()
    assert sql("SELECT * FROM workerpool_cron") == before


def test_removing_a_name_nobody_added_is_unknown(app):
    with pytest.raises(UnknownCron, match="unknown cron 'nope'"):
        app.cron_remove("nope")


@pytest.mark.parametrize(
    ("args", "options", "error", "message"),
    [
        ((EVERY, "every hour"), {"task": "digest"}, ConfigError, "bad expression"),
        (
            ("digest", "* * * * *"),
            {"task": "digest", "timezone": "Mars/Olympus"},
            ConfigError,
            "unknown timezone",
        ),
        (("digest", "* * * * *"), {"task": "nope"}, UnknownTask, "nope"),
        (
            ("digest", "* * * * *"),
            {"task": "digest", "queue": "other"},
            ConfigError,
            "runs on queue 'q'",
        ),
        (("digest", "* * * * *"), {"task": "digest", "payload": [1]}, PayloadError, "payload"),
        (("bad name!", "* * * * *"), {"task": "digest"}, ConfigError, "is invalid"),
    ],
)
def test_bad_input_is_refused_by_name_and_nothing_written(app, sql, args, options, error, message):
    with pytest.raises(error, match=message):
        app.cron_add(*args, **options)
    assert sql("SELECT count(*) FROM workerpool_cron") == [(0,)]
    assert sql("SELECT count(*) FROM workerpool_audit") == [(0,)]


@pytest.mark.slow
def test_the_command_line_adds_and_removes(app, sql, db_url, tmp_path):
    target = ("--app", "tests.apps.cron_added:pool")
    added = run_cli(
        "cron",
        "add",
        "digest",
        "*/5 * * * *",
        "--task",
        "digest",
        "--payload",
        '{"n": 1}',
        *target,
        url=db_url,
        cwd=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    assert sql("SELECT expression, task, payload FROM workerpool_cron") == [
        ("*/5 * * * *", "digest", {"n": 1})
    ]
    bad = run_cli(
        "cron", "add", "x", "61 * * * *", "--task", "digest", *target, url=db_url, cwd=tmp_path
    )
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "bad expression" in bad.stderr
    removed = run_cli("cron", "remove", "digest", url=db_url, cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert sql("SELECT count(*) FROM workerpool_cron") == [(0,)]
    again = run_cli("cron", "remove", "digest", url=db_url, cwd=tmp_path)
    assert again.returncode != 0 and "unknown cron 'digest'" in again.stderr
