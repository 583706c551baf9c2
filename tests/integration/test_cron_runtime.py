"""Cron at run time against real PostgreSQL: a pause every scheduler honours, kept across a
restart (a new pool and a new scheduler), a run now unique per request, and bad input refused
by name with nothing written."""

from __future__ import annotations

import pytest

from tests.apps.cron_runtime import build
from tests.helpers.waiting import wait_until
from workerpool import ConfigError
from workerpool.model.errors import InvalidActor, InvalidJob, UnknownCron
from workerpool.ops.crons import list_crons
from workerpool.runtime.maintenance import Maintenance
from workerpool.testing import drain


@pytest.fixture
def app(db_url):
    pool = build(db_url)
    yield pool
    pool.dispose()


def beat_jobs(sql):
    return sql("SELECT id FROM workerpool_jobs WHERE task = 'beat' ORDER BY id")


def row(sql, name="beat"):
    return sql(
        "SELECT paused, paused_by, changed_by, last_tick, next_tick, last_job_id"
        " FROM workerpool_cron WHERE name = %s",
        name,
    )[0]


def ticks_pass(sql, scheduler, count=2):
    """Run passes until ``count`` more ticks of beat were handled (last_tick moved on)."""
    seen = []

    def moved() -> bool:
        scheduler.run_pass()
        last = row(sql)[3]
        if not seen or seen[-1] != last:
            seen.append(last)
        return len(seen) > count

    wait_until(moved, timeout=10, message=f"{count} ticks handled")


def test_a_paused_cron_enqueues_nothing_even_after_a_restart_until_resumed(app, db_url, sql):
    scheduler = Maintenance(app.registry, app.engine, worker_id="m1")
    ticks_pass(sql, scheduler)
    drain(app, "cron")  # its run is done: the next tick is not skipped as an overlap
    before = beat_jobs(sql)
    assert before, "the schedule ran before the pause"

    app.cron_pause("beat", by="alice")
    paused, by, changed_by, *_ = row(sql)
    assert (paused, by, changed_by) == (True, "alice", "alice")
    ticks_pass(sql, scheduler)
    assert beat_jobs(sql) == before  # ticks passed, none became a job
    assert sql("SELECT skipped FROM workerpool_cron")[0][0] == 0  # nor an overlap skip

    restarted = build(db_url)  # the code declares the defaults again: the pause stays
    try:
        ticks_pass(sql, Maintenance(restarted.registry, restarted.engine, worker_id="m2"))
    finally:
        restarted.dispose()
    assert beat_jobs(sql) == before and row(sql)[0] is True

    app.cron_resume("beat", by="carol")
    assert row(sql)[:3] == (False, None, "carol")
    ticks_pass(sql, scheduler)
    assert len(beat_jobs(sql)) > len(before)


def test_pausing_a_declared_cron_before_any_scheduler_ran_creates_its_row(app, sql):
    app.cron_pause("nightly", by="alice")
    assert sql("SELECT expression, paused FROM workerpool_cron WHERE name = 'nightly'") == [
        ("0 3 * * *", True)
    ]
    view = {v.name: v for v in list_crons(app)}
    assert view["nightly"].paused and view["nightly"].paused_by == "alice"
    assert view["nightly"].declared == "0 3 * * *"
    assert not view["beat"].paused and view["beat"].next_tick is None  # declared, never seen


def test_run_now_enqueues_one_job_per_request(app, sql):
    first = app.cron_run("nightly", by="alice", request="r1")
    again = app.cron_run("nightly", by="alice", request="r1")
    other = app.cron_run("nightly", by="alice")
    assert first == again and other != first
    key, manual = sql("SELECT key, payload->>'manual' FROM workerpool_jobs WHERE id = %s", first)[0]
    assert (key, manual) == ("cron:nightly:manual:r1", "true")
    assert row(sql, "nightly")[5] == other  # the schedule's last job: overlap checks see it
    runs = sql(
        "SELECT actor, source, detail->>'job_id' FROM workerpool_audit"
        " WHERE action = 'cron_run' ORDER BY id"
    )
    assert runs == [("alice", "api", str(first)), ("alice", "api", str(other))]


def test_a_cron_known_only_from_its_row_can_be_paused_but_not_run(app, db_url, sql):
    app.cron_pause("beat", by="alice")
    from workerpool import WorkerPool

    bare = WorkerPool(db_url)  # the command line without --app
    try:
        bare.cron_resume("beat", by="bob")
        assert row(sql)[0] is False
        with pytest.raises(UnknownCron, match="the app must declare it"):
            bare.cron_run("beat", by="bob")
        assert beat_jobs(sql) == []
    finally:
        bare.dispose()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda p: p.cron_pause("nope", by="a"), UnknownCron, "unknown cron 'nope'"),
        (lambda p: p.cron_resume("nope", by="a"), UnknownCron, "known crons: beat, nightly"),
        (lambda p: p.cron_run("nope", by="a"), UnknownCron, "unknown cron 'nope'"),
        (lambda p: p.cron_pause("bad name!", by="a"), ConfigError, "cron name 'bad name!'"),
        (lambda p: p.cron_pause(None, by="a"), ConfigError, "cron name None"),
        (lambda p: p.cron_pause("beat", by=""), InvalidActor, "actor must be"),
        (lambda p: p.cron_pause("beat", by="x\ny"), InvalidActor, "actor must be"),
        (lambda p: p.cron_pause("beat", by="x" * 201), InvalidActor, "actor must be"),
        (lambda p: p.cron_run("beat", by="a", request=7), InvalidJob, "request must be"),
        (lambda p: p.cron_run("beat", by="a", request="r" * 101), InvalidJob, "request must be"),
        (lambda p: p.cron_run("beat", by="a", request=" "), InvalidJob, "request must be"),
    ],
)
def test_bad_input_is_refused_by_name_and_nothing_is_written(app, sql, call, error, message):
    with pytest.raises(error, match=message) as caught:
        call(app)
    assert "\n" not in str(caught.value)
    assert sql("SELECT count(*) FROM workerpool_cron")[0][0] == 0
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 0
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 0
