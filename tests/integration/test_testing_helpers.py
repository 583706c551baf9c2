"""workerpool.testing for users' suites: reading the real table, drain, inline mode."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from workerpool import ConfigError, InvalidJob, Permanent, RetryLater, WorkerPool, testing


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.seen = []

    @pool.task(queue="email", max_attempts=3)
    def send(job):
        pool.seen.append(("send", job.payload))
        if job.payload.get("fail"):
            raise RuntimeError("smtp down")
        if job.payload.get("refuse"):
            raise Permanent("no such address")

    @pool.task(queue="chores")
    def tidy(job):
        pool.seen.append(("tidy", job.payload))
        if job.payload.get("then_send"):
            pool.enqueue("send", {"from": "tidy"})
        if job.payload.get("wait"):
            raise RetryLater(3600)

    return pool


def test_enqueued_reads_the_table_and_matches_fields(app):
    first = app.enqueue("send", {"to": "a"}, key="k:a")
    app.enqueue("send", {"to": "b"}, priority=5)
    app.enqueue("tidy", {})
    assert [row.id for row in testing.enqueued(app, "send", key="k:a")] == [first]
    assert len(testing.enqueued(app, app.tasks["send"].fn)) == 2
    assert len(testing.enqueued(app)) == 3
    assert testing.enqueued(app, "send", payload={"to": "b"})[0].priority == 5
    assert testing.enqueued(app, "send", payload={"to": "c"}) == []
    assert len(testing.enqueued(app, queue="chores")) == 1


def test_assertions_pass_and_fail_with_a_readable_message(app):
    with app.engine.connect() as conn:
        trans = conn.begin()
        app.enqueue("send", {"to": "rolled back"}, conn=conn)
        trans.rollback()
    testing.assert_not_enqueued(app, "send")
    app.enqueue("send", {"to": "a"}, key="k:a")
    assert testing.assert_enqueued(app, "send", payload={"to": "a"}, key="k:a", count=1)
    with pytest.raises(AssertionError, match=r"expected a job of task 'send'.*#\d+ send pending"):
        testing.assert_enqueued(app, "send", payload={"to": "z"})
    with pytest.raises(AssertionError, match="expected no job"):
        testing.assert_not_enqueued(app, "send", key="k:a")
    with pytest.raises(AssertionError, match="expected 2 job"):
        testing.assert_enqueued(app, "send", count=2)


def test_bad_arguments_are_refused_by_name(app):
    with pytest.raises(TypeError, match="cannot match on \\['colour'\\]"):
        testing.enqueued(app, "send", colour="red")
    with pytest.raises(Exception, match="unknown task 'nope'"):
        testing.enqueued(app, "nope")
    with pytest.raises(InvalidJob, match="retries must be one of"):
        testing.drain(app, retries="sometimes")
    with pytest.raises(Exception, match="unknown queue 'nowhere'"):
        testing.drain(app, "nowhere")
    with pytest.raises(ConfigError, match="testing mode"):
        app.testing_mode("eager")


def test_drain_runs_every_queue_and_says_how_each_ended(app):
    ok = app.enqueue("send", {"to": "a"})
    failing = app.enqueue("send", {"fail": True})
    refused = app.enqueue("send", {"refuse": True})
    waits = app.enqueue("tidy", {"wait": True})
    ran = testing.drain(app)
    assert [(r.job_id, r.task, r.state, r.outcome.kind) for r in ran] == [
        (waits, "tidy", "pending", "snooze"),  # queues in name order: chores, email
        (ok, "send", "done", "done"),
        (failing, "send", "failed", "fail"),  # waits its backoff: not run again in this drain
        (refused, "send", "dead", "permanent"),
    ]
    assert ran[2].outcome.error["message"] == "smtp down"
    testing.assert_enqueued(app, "send", state="failed", attempts=1)


def test_drain_can_run_retries_at_once_until_dead(app):
    failing = app.enqueue("send", {"fail": True})
    ran = testing.drain(app, "email", retries="now")
    assert [(r.job_id, r.state) for r in ran] == [
        (failing, "failed"),
        (failing, "failed"),
        (failing, "dead"),
    ]
    testing.assert_enqueued(app, "send", state="dead", attempts=3)


def test_inline_runs_after_commit_never_inside_and_not_after_rollback(app, sql):
    sql("CREATE TABLE users (id int)")
    seen_inside = []

    @app.task(queue="email")
    def welcome(job):
        # visible only if the enqueuing transaction has committed
        seen_inside.append(sql("SELECT count(*) FROM users")[0][0])

    with app.testing_mode("inline"):
        with app.engine.begin() as conn:
            conn.execute(text("INSERT INTO users VALUES (1)"))
            app.enqueue("welcome", {}, conn=conn)
            assert seen_inside == []  # not inside the transaction
        assert seen_inside == [1]  # right after its commit, the user row visible to the job
        with app.engine.connect() as conn:
            trans = conn.begin()
            app.enqueue("welcome", {}, conn=conn)
            trans.rollback()
        assert seen_inside == [1]
        app.enqueue("tidy", {"then_send": True})  # no caller transaction: runs at once
        assert app.seen == [("tidy", {"then_send": True}), ("send", {"from": "tidy"})]
    app.enqueue("send", {"to": "after"})  # the mode ended with the block
    testing.assert_enqueued(app, "send", payload={"to": "after"})
    testing.assert_enqueued(app, "welcome", state="done", count=1)


def test_inline_with_an_async_connection(app, sql):
    async def main():
        engine = create_async_engine(app.url.set(drivername="postgresql+psycopg_async"))
        async with engine.begin() as conn:
            await app.enqueue_many_async([("send", {"n": 1}), ("send", {"n": 2})], conn=conn)
            assert app.seen == []
        await engine.dispose()

    app.testing_mode("inline")
    asyncio.run(main())
    assert app.seen == [("send", {"n": 1}), ("send", {"n": 2})]
    testing.assert_enqueued(app, "send", state="done", count=2)
    app.testing_mode(None)


def test_inline_drains_only_the_queue_of_the_new_job(app):
    waiting = app.enqueue("tidy", {})  # before inline mode: a backlog in another queue
    with app.testing_mode("inline"):
        app.enqueue("send", {"to": "a"})
    assert app.seen == [("send", {"to": "a"})]
    assert [row.id for row in testing.enqueued(app, "tidy")] == [waiting]
