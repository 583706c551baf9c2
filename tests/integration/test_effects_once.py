"""Effects that happen once, against real PostgreSQL: ``job.complete_in`` commits a handler's
own write with the job's ``done``, ``job.step(conn=)`` commits it with the step's record, every
misuse is refused by name with nothing written, and ``testing.crash_points`` passes a fenced
handler and fails a naive one.

Real processes (a SIGKILL storm, a frozen worker) are in
tests/processes/test_effects_once_processes.py.
"""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from tests.helpers.metrics import scraped
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import (
    Backoff,
    CompletionLeaseLost,
    CompletionRefused,
    CrashPointFailure,
    LeaseLost,
    WorkerPool,
    testing,
)

LEDGER = "CREATE TABLE ledger (job_id bigint NOT NULL, order_id int NOT NULL)"

pytest_plugins = ["pytester"]


@pytest.fixture
def app(pool: WorkerPool, sql) -> WorkerPool:
    sql(LEDGER)
    pool.queue("q")
    pool.queue("reports")
    return pool


def charge(conn, job) -> None:
    conn.execute(
        text("INSERT INTO ledger VALUES (:j, :o)"), {"j": job.id, "o": job.payload["order"]}
    )


def ledger(sql, job_id: int | None = None) -> list[tuple]:
    if job_id is None:
        return sql("SELECT job_id, order_id FROM ledger ORDER BY job_id")
    return sql("SELECT job_id, order_id FROM ledger WHERE job_id = %s", job_id)


def row(sql, job_id: int) -> tuple:
    return sql("SELECT state, result, attempts FROM workerpool_jobs WHERE id = %s", job_id)[0]


# -- complete_in ---------------------------------------------------------------------------------


def test_the_effect_and_the_done_commit_together_and_the_runner_writes_nothing_more(app, sql):
    @app.task(queue="q")
    def billed(job):
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn, result={"charged": 990})
        raise RuntimeError("after the commit: the done stands")

    job_id = app.enqueue("billed", {"order": 7})
    [ran] = testing.drain(app, "q")
    assert (ran.state, ran.outcome.kind) == ("done", "committed")
    assert ledger(sql) == [(job_id, 7)]
    assert row(sql, job_id) == ("done", {"charged": 990}, 1)
    assert sql("SELECT errors FROM workerpool_jobs WHERE id = %s", job_id)[0][0] == []


def test_a_rolled_back_block_leaves_the_job_to_the_handlers_raise(app, sql):
    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def flaky(job):
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn, result="paid")
            if job.attempt == 1:
                raise ConnectionError("the bank hung up")

    job_id = app.enqueue("flaky", {"order": 8})
    ran = testing.drain(app, "q", retries="now")
    assert [(r.state, r.outcome.kind) for r in ran] == [("failed", "fail"), ("done", "committed")]
    assert ledger(sql) == [(job_id, 8)]
    assert row(sql, job_id) == ("done", "paid", 2)


def test_an_orm_session_works_like_a_connection(app, sql):
    @app.task(queue="q")
    def with_session(job):
        with Session(app.engine) as session, session.begin():
            charge(session.connection(), job)
            job.complete_in(session, result=1)

    job_id = app.enqueue("with_session", {"order": 9})
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert ledger(sql) == [(job_id, 9)]


def test_an_async_connection_completes_through_complete_in_async(app, sql, db_url):
    from sqlalchemy.ext.asyncio import create_async_engine

    async_engine = create_async_engine(db_url.set(drivername="postgresql+psycopg"))

    @app.task(queue="q")
    async def billed_async(job):
        async with async_engine.begin() as conn:
            await conn.run_sync(lambda sync: charge(sync, job))
            await job.complete_in_async(conn, result="async")
        await async_engine.dispose()

    job_id = app.enqueue("billed_async", {"order": 10})
    assert testing.drain(app, "q") == [(job_id, "done")]
    assert ledger(sql) == [(job_id, 10)]
    assert row(sql, job_id)[1] == "async"


def test_an_async_step_is_recorded_in_its_async_connections_transaction(app, sql, db_url):
    from sqlalchemy.ext.asyncio import create_async_engine

    async_engine = create_async_engine(db_url.set(drivername="postgresql+psycopg"))

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    async def debit_async(job):
        async def debit():
            await conn.run_sync(lambda sync: charge(sync, job))
            return "debited"

        try:
            async with async_engine.begin() as conn:
                await job.step_async("debit", debit, conn=conn)
                if job.attempt == 1:
                    raise ConnectionError("rolled back with the step's record")
        finally:
            await async_engine.dispose()

    job_id = app.enqueue("debit_async", {"order": 18})
    ran = testing.drain(app, "q", retries="now")
    assert [r.state for r in ran] == ["failed", "done"]
    assert ledger(sql) == [(job_id, 18)]
    steps = sql("SELECT steps FROM workerpool_jobs WHERE id = %s", job_id)[0][0]
    assert steps["debit"]["attempt"] == 2 and steps["debit"]["value"] == "debited"


def test_a_lost_lease_raises_there_and_the_effect_never_commits(app, sql, dsn):
    import psycopg

    seen: list[BaseException] = []

    @app.task(queue="q")
    def overtaken(job):
        with psycopg.connect(dsn, autocommit=True) as other:  # another process took it over
            other.execute(
                "UPDATE workerpool_jobs SET claimed_by = 'someone-else' WHERE id = %s", (job.id,)
            )
        try:
            with app.engine.begin() as conn:
                charge(conn, job)
                job.complete_in(conn, result="mine")
        except LeaseLost as exc:
            seen.append(exc)
            raise

    job_id = app.enqueue("overtaken", {"order": 11})
    [ran] = testing.drain(app, "q")
    assert ran.state is None  # the runner's own outcome is fenced out too
    assert isinstance(seen[0], CompletionLeaseLost) and isinstance(seen[0], CompletionRefused)
    assert "lease lost" in str(seen[0])
    assert ledger(sql) == []
    assert row(sql, job_id)[0] == "processing"


@pytest.mark.parametrize("misuse", ["twice", "after_cancel", "no_transaction", "not_a_conn"])
def test_misuse_is_refused_by_name_and_nothing_is_written(app, sql, misuse):
    refusals: list[str] = []

    @app.task(queue="q")
    def misused(job):
        try:
            with app.engine.begin() as conn:
                charge(conn, job)
                _misuse(app, job, conn, misuse)
        except CompletionRefused as exc:
            refusals.append(str(exc))
        return "returned"

    job_id = app.enqueue("misused", {"order": 12})
    [ran] = testing.drain(app, "q")
    assert len(refusals) == 1, refusals
    assert ran.state == "done"
    if misuse == "twice":  # the first call's effect and done committed; the second wrote nothing
        assert ledger(sql) == [(job_id, 12)] and "already called" in refusals[0]
        assert row(sql, job_id)[1] is None
    else:
        assert ledger(sql) == []
        assert row(sql, job_id)[:2] == ("done", "returned")


def _misuse(app: WorkerPool, job, conn, misuse: str) -> None:
    if misuse == "twice":
        job.complete_in(conn)
        conn.commit()
        job.complete_in(conn)
    elif misuse == "after_cancel":
        job.cancelled.set()
        job.complete_in(conn)
    elif misuse == "no_transaction":
        with app.engine.connect() as idle:
            job.complete_in(idle)
    else:
        job.complete_in(object())


def test_a_connection_to_another_database_is_refused(app, sql, db_url, empty_db_url):
    from sqlalchemy import create_engine

    elsewhere = create_engine(empty_db_url.set(drivername="postgresql+psycopg"))
    refusals: list[str] = []

    @app.task(queue="q")
    def wrong_db(job):
        with elsewhere.begin() as conn:
            try:
                job.complete_in(conn)
            except CompletionRefused as exc:
                refusals.append(str(exc))

    job_id = app.enqueue("wrong_db", {"order": 13})
    assert testing.drain(app, "q") == [(job_id, "done")]
    elsewhere.dispose()
    assert len(refusals) == 1 and "another database" in refusals[0]


def test_outside_a_running_handler_it_is_refused(app, sql):
    kept = []

    @app.task(queue="q")
    def keeper(job):
        job.step("s", lambda: 1)
        kept.append(job)

    job_id = app.enqueue("keeper", {"order": 14})
    assert testing.drain(app, "q") == [(job_id, "done")]
    with app.engine.begin() as conn, pytest.raises(CompletionRefused, match="outside a running"):
        kept[0].complete_in(conn)
    from workerpool import Job

    bare = Job(id=1, queue="q", task="t", payload={}, payload_version=1, attempt=1, max_attempts=1)
    with app.engine.begin() as conn, pytest.raises(CompletionRefused, match="outside a running"):
        bare.complete_in(conn)


# -- what follows the completion -----------------------------------------------------------------


def test_batch_callbacks_dependents_and_waiters_follow_complete_in(app, sql):
    @app.task(queue="q")
    def member(job):
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn, result=job.payload["order"])

    @app.task(queue="reports")
    def report(job):
        return "reported"

    @app.task(queue="q")
    def after_it(job):
        return list(job.parent_results.values())

    with app.batch(on_complete="report") as batch:
        first = batch.enqueue("member", {"order": 1})
    dependent = app.enqueue("after_it", {}, after=[first])
    testing.drain(app, "q")
    assert app.batch_status(batch.id).finished
    assert [r.result for r in testing.drain(app, "reports")] == ["reported"]
    assert app.result(dependent, timeout=5) == [1]


def test_a_worker_counts_the_job_done_logs_no_lost_lease_and_fires_the_callback(
    app, sql, caplog, metrics_recorder
):
    _, directory = metrics_recorder
    caplog.set_level(logging.DEBUG, logger="workerpool")

    @app.task(queue="q")
    def member(job):
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn, result="ok")

    @app.task(queue="reports")
    def report(job):
        return None

    with app.batch(on_complete="report") as batch:
        ids = [batch.enqueue("member", {"order": n}) for n in range(5)]
    with running(app, "q"):
        wait_until(lambda: app.batch_status(batch.id).finished, message="the batch finished")
        wait_until(
            lambda: (
                scraped(directory).get(
                    (
                        "workerpool_jobs_finished_total",
                        (("outcome", "done"), ("queue", "q"), ("task", "member")),
                    )
                )
                == 5
            ),
            message="five done counted",
        )
    assert sorted(j for j, _ in ledger(sql)) == ids
    events = {getattr(r, "event", "") for r in caplog.records}
    assert not events & {"lease_lost", "outcome_fenced_out"}, events
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE task = 'report'")[0][0] == 1


# -- step(conn=) ---------------------------------------------------------------------------------


def test_a_step_in_the_callers_transaction_commits_with_its_effect_or_not_at_all(app, sql):
    calls: list[int] = []

    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def debit(job):
        with app.engine.begin() as conn:
            job.step("debit", lambda: calls.append(job.attempt) or charge(conn, job), conn=conn)
            if job.attempt == 1:
                raise ConnectionError("rolled back with the step's record")
        with app.engine.begin() as conn:
            job.step("again", lambda: calls.append(job.attempt) or charge(conn, job), conn=conn)

    job_id = app.enqueue("debit", {"order": 15})
    ran = testing.drain(app, "q", retries="now")
    assert [r.state for r in ran] == ["failed", "done"]
    assert calls == [1, 2, 2]  # the rolled-back step ran again; the committed one is kept
    assert ledger(sql) == [(job_id, 15), (job_id, 15)]
    steps = sql("SELECT steps FROM workerpool_jobs WHERE id = %s", job_id)[0][0]
    assert set(steps) == {"debit", "again"} and steps["debit"]["attempt"] == 2


def test_a_retried_job_replays_a_committed_step_without_its_effect(app, sql):
    @app.task(queue="q", backoff=Backoff(base=0, cap=0))
    def once_then_fail(job):
        with app.engine.begin() as conn:
            job.step("debit", lambda: charge(conn, job) or "debited", conn=conn)
        if job.attempt == 1:
            raise ConnectionError("after the step committed")

    job_id = app.enqueue("once_then_fail", {"order": 16})
    assert [r.state for r in testing.drain(app, "q", retries="now")] == ["failed", "done"]
    assert ledger(sql) == [(job_id, 16)]


# -- crash_points --------------------------------------------------------------------------------


def counted_once(sql):
    def check(job_id: int) -> None:
        assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)[0][0] == "done"
        assert len(ledger(sql, job_id)) == 1, f"ledger rows: {ledger(sql, job_id)}"

    return check


def test_crash_points_passes_a_fenced_handler_at_every_point(app, sql):
    @app.task(queue="q", max_attempts=10)
    def fenced(job):
        with app.engine.begin() as conn:
            job.step("hold", lambda: charge(conn, job) or "held", conn=conn)
        job.step("lookup", lambda: 42)
        with app.engine.begin() as conn:
            conn.execute(
                text("UPDATE ledger SET order_id = order_id + 1 WHERE job_id = :j"), {"j": job.id}
            )
            job.complete_in(conn, result="charged")

    tried = testing.crash_points(app, "fenced", {"order": 1}, check=counted_once(sql))
    assert tried == [
        "step:hold:before-record",
        "step:hold:after-record",
        "step:lookup:before-record",
        "step:lookup:after-record",
        "complete_in:before",
        "complete_in:after",
        "complete_in:committed",
        "outcome",
    ]
    # each run's effect is there once, and bumped once
    assert {order for _, order in ledger(sql)} == {2}


def test_crash_points_fails_a_naive_handler_naming_the_point(app, sql):
    @app.task(queue="q", max_attempts=10)
    def naive(job):
        with app.engine.begin() as conn:
            charge(conn, job)  # committed on its own, before the outcome write
        return "charged"

    with pytest.raises(CrashPointFailure, match=r"crash at outcome: check\(\d+\) failed") as info:
        testing.crash_points(app, naive, {"order": 2}, check=counted_once(sql))
    assert "ledger rows" in str(info.value)


def test_crash_points_in_inline_mode_and_with_a_reset(app, sql):
    app.testing_mode("inline")
    resets: list[int] = []

    @app.task(queue="q", max_attempts=10)
    def fenced_inline(job):
        job.checkpoint({"at": 1})
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn)

    tried = testing.crash_points(
        app,
        "fenced_inline",
        {"order": 3},
        check=counted_once(sql),
        reset=lambda: resets.append(1),
    )
    assert tried[:2] == ["checkpoint:before", "checkpoint:after"]
    assert len(resets) == len(tried) + 1


def test_crash_points_refuses_bad_input_before_anything_is_written(app, sql):
    @app.task(queue="q")
    def noop(job):
        return None

    with pytest.raises(Exception, match="callable"):
        testing.crash_points(app, "noop", {}, check=None)
    with pytest.raises(Exception, match="key="):
        testing.crash_points(app, "noop", {}, check=print, key="k")
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 0


def test_a_renewal_that_finds_the_job_done_by_its_handler_logs_no_loss(app, sql, caplog):
    app.queue("renewed", stale_after=3)  # leases renewed every second
    caplog.set_level(logging.INFO, logger="workerpool")
    renewals: list[float] = []

    @app.task(queue="renewed")
    def lingers(job):
        with app.engine.begin() as conn:
            charge(conn, job)
            job.complete_in(conn)
        wait_until(lambda: len(renewals) >= 2, 10, message="two renewals after the commit")

    job_id = app.enqueue("lingers", {"order": 17})
    with running(app, "renewed") as worker:
        renew = worker.leases.renew_if_due

        def counted() -> None:
            before = worker.leases.last_renew
            renew()
            if worker.leases.last_renew != before and ledger(sql, job_id):
                renewals.append(worker.leases.last_renew)

        worker.leases.renew_if_due = counted  # type: ignore[method-assign]
        wait_until(lambda: app.job(job_id).state == "done" and len(renewals) >= 2, 20)
    events = [getattr(r, "event", "") for r in caplog.records]
    assert "lease_lost" not in events and "outcome_fenced_out" not in events, events
    assert ledger(sql, job_id) == [(job_id, 17)]


USER_APP = """
from sqlalchemy import text
from workerpool import WorkerPool

pool = WorkerPool()
pool.queue("billing")

def write(conn, job):
    conn.execute(text("INSERT INTO ledger VALUES (:j, 0)"), {"j": job.id})

@pool.task(queue="billing", max_attempts=10)
def fenced(job):
    with pool.engine.begin() as conn:
        write(conn, job)
        job.complete_in(conn)

@pool.task(queue="billing", max_attempts=10)
def naive(job):
    with pool.engine.begin() as conn:
        write(conn, job)
"""

USER_TESTS = """
import pytest
from sqlalchemy import text
from workerpool import testing

def once(pool):
    with pool.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS ledger (job_id bigint, n int)"))

    def check(job_id):
        with pool.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT count(*) FROM ledger WHERE job_id = :j"), {"j": job_id}
            ).scalar()
        assert rows == 1, f"{rows} ledger rows"

    return check

@pytest.mark.parametrize("task", ["fenced", "naive"])
def test_effects_once(workerpool_pool, task):
    testing.crash_points(workerpool_pool, task, {}, check=once(workerpool_pool))
"""


@pytest.mark.slow
def test_crash_points_in_a_users_suite_on_the_workerpool_pool_fixture(pytester):
    pytester.makepyfile(billing=USER_APP, test_billing=USER_TESTS)
    pytester.makeini("[pytest]\nworkerpool_app = billing:pool\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*CrashPointFailure: crash at outcome: check(*) failed*2 ledger*"])
