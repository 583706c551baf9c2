"""Bounded queues: an enqueue that would take a queue past ``max_pending`` jobs waiting to run
raises QueueFull with nothing written (single, many, async, in a caller's transaction, SQL),
and the queue accepts again once it drained."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import text

from tests.helpers.asyncio_engine import on_own_async_engine
from tests.helpers.doors import error_line, psql
from tests.helpers.metrics import scraped
from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import ConfigError, QueueFull, WorkerPool
from workerpool.model import metrics
from workerpool.model.errors import NotMigrated
from workerpool.runtime.maintenance import Maintenance

BOUND = 3


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("small", max_pending=BOUND, poll_interval=0.1)
    pool.queue("free")

    @pool.task(queue="small")
    def tick(job):
        return None

    @pool.task(queue="free")
    def tock(job):
        return None

    return pool


def waiting(sql, queue: str = "small") -> int:
    return sql("SELECT count(*) FROM workerpool_jobs WHERE queue = %s", queue)[0][0]


def fill(app: WorkerPool) -> None:
    for n in range(BOUND):
        app.enqueue("tick", {"n": n})


def test_a_single_enqueue_past_the_bound_raises_and_writes_nothing(app, sql):
    fill(app)
    full = r"^queue small is full: 3 jobs waiting to run or reserved, bound 3"
    with pytest.raises(QueueFull, match=full):
        app.enqueue("tick", {"n": 99})
    assert waiting(sql) == BOUND


def test_the_bound_counts_waiting_and_retrying_jobs_not_running_ones(app, sql):
    fill(app)
    sql("UPDATE workerpool_jobs SET state = 'failed' WHERE payload = '{\"n\": 0}'")
    sql("UPDATE workerpool_jobs SET state = 'waiting' WHERE payload = '{\"n\": 1}'")
    with pytest.raises(QueueFull):
        app.enqueue("tick", {})
    sql("UPDATE workerpool_jobs SET state = 'done' WHERE payload = '{\"n\": 2}'")
    app.enqueue("tick", {})
    assert waiting(sql) == BOUND + 1  # the done job is no longer waiting to run


def test_a_batch_that_does_not_fit_is_refused_whole(app, sql):
    app.enqueue("tick", {})
    with pytest.raises(QueueFull, match="refused 3 more"):
        app.enqueue_many([("tick", {"n": n}) for n in range(3)])
    with pytest.raises(QueueFull):  # keyed: the INSERT path, not COPY
        app.enqueue_many([("tick", {"n": n}, {"key": f"k{n}"}) for n in range(3)])
    with pytest.raises(QueueFull):  # another queue's jobs in the batch change nothing
        app.enqueue_many([("tock", {}), *[("tick", {"n": n}) for n in range(3)]])
    assert waiting(sql) == 1
    assert waiting(sql, "free") == 0
    assert len(app.enqueue_many([("tick", {"n": n}) for n in range(2)] + [("tock", {})])) == 3


def test_in_a_callers_transaction_the_refusal_leaves_it_usable(app, sql):
    fill(app)
    sql("CREATE TABLE orders (id int)")
    with app.engine.begin() as conn:
        conn.execute(text("INSERT INTO orders VALUES (1)"))
        with pytest.raises(QueueFull):
            app.enqueue("tick", {}, conn=conn)
        conn.execute(text("INSERT INTO orders VALUES (2)"))
    assert sql("SELECT count(*) FROM orders") == [(2,)]
    assert waiting(sql) == BOUND


def test_async_enqueue_past_the_bound_raises(app, sql):
    fill(app)

    async def body(engine):
        with pytest.raises(QueueFull):
            await app.enqueue_async("tick", {})
        async with engine.begin() as conn:
            with pytest.raises(QueueFull):
                await app.enqueue_many_async([("tick", {})], conn=conn)

    on_own_async_engine(app, body)
    assert waiting(sql) == BOUND


def test_an_unbounded_queue_takes_any_number(app, sql):
    fill(app)
    app.enqueue_many([("tock", {"n": n}) for n in range(BOUND * 3)])
    assert waiting(sql, "free") == BOUND * 3


def test_a_full_queue_accepts_again_once_drained(app, sql):
    fill(app)
    with pytest.raises(QueueFull):
        app.enqueue("tick", {})
    with running(app, "small"):
        wait_until(lambda: sql("SELECT queue, max_pending FROM workerpool_queue_bounds"))
        assert sql("SELECT queue, max_pending FROM workerpool_queue_bounds") == [("small", BOUND)]
        wait_until(
            lambda: (
                waiting(sql)
                == sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0]
            )
        )
    job_id = app.enqueue("tick", {"again": True})
    assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("pending",)]


def test_sql_enqueue_honours_the_bound_its_workers_registered(app, dsn, sql):
    app.register_tasks()
    assert sql("SELECT queue, max_pending FROM workerpool_queue_bounds") == [("small", BOUND)]
    fill(app)
    run = psql(dsn, "SELECT workerpool_enqueue('tick', '{}')")
    assert run.code != 0
    assert error_line(run) == "queue small is full: it holds its bound of 3 jobs waiting to run"
    assert waiting(sql) == BOUND
    assert psql(dsn, "SELECT workerpool_enqueue('tock', '{}')").code == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10", 10**9])
def test_a_bad_bound_is_refused_when_declared(bad):
    with pytest.raises(ConfigError, match=r"max_pending must be an int within 1\.\.100000000"):
        WorkerPool("postgresql://unused/x").queue("q", max_pending=bad)


def test_the_bound_is_a_metric_beside_the_depth(app, sql, metrics_recorder):
    app.register_tasks()
    fill(app)
    Maintenance(app.registry, app.engine, worker_id="m").run_pass()
    metrics.record.flush()
    samples = scraped(metrics_recorder[1])
    assert samples[("workerpool_queue_max_pending", (("queue", "small"),))] == BOUND
    assert ("workerpool_queue_max_pending", (("queue", "free"),)) not in samples
    assert samples[("workerpool_queue_depth", (("queue", "small"), ("state", "queued")))] == 3


def test_linked_jobs_count_against_the_bound_and_a_chain_is_refused_whole(app, sql):
    first = app.enqueue("tick", {"n": 0})
    app.enqueue("tick", {"n": 1}, after=[first])  # waiting for its parent: it counts
    with pytest.raises(QueueFull):
        app.chain([("tock", {}), ("tick", {"n": 2}), ("tick", {"n": 3})])
    assert waiting(sql) == 2
    assert waiting(sql, "free") == 0  # the chain's first job went with the rest
    app.enqueue("tick", {"n": 4}, sequence="s")  # the last place
    with pytest.raises(QueueFull):
        app.enqueue("tick", {"n": 5}, sequence="s")
    assert waiting(sql) == BOUND


def test_a_database_without_the_bounds_migration_says_migrate(empty_db_url):
    pool = WorkerPool(empty_db_url)
    pool.queue("small", max_pending=BOUND)
    pool.task(queue="small", name="tick")(lambda job: None)
    try:
        pool.migrate("0019")
        with pytest.raises(NotMigrated, match="workerpool migrate"):
            pool.enqueue("tick", {})
    finally:
        pool.dispose()


# -- the credit: an enqueue of its own does not count (migration 0023) -----------------------

LARGE = 10_000  # a credit is a hundredth of the bound: 100 here


@pytest.fixture
def large(pool: WorkerPool) -> WorkerPool:
    pool.queue("large", max_pending=LARGE)
    pool.task(queue="large", name="fill")(lambda job: None)
    return pool


def credit(sql, queue: str = "large") -> int | None:
    rows = sql("SELECT credit FROM workerpool_queue_credits WHERE queue = %s", queue)
    return rows[0][0] if rows else None


def test_an_enqueue_of_its_own_takes_from_a_credit_a_count_granted(large, sql):
    large.enqueue("fill", {"n": 0})  # counts: 0 waiting, so it grants a hundredth of the bound
    assert credit(sql) == LARGE // 100
    for n in range(1, 31):
        large.enqueue("fill", {"n": n})
    assert credit(sql) == LARGE // 100 - 30
    with large.engine.begin() as conn:  # in a caller's transaction it counts instead
        large.enqueue("fill", {"n": 31}, conn=conn)
    assert credit(sql) == LARGE // 100 - 30
    assert waiting(sql, "large") == 32


def test_taking_from_the_credit_reads_no_waiting_job(large, sql):
    """The waiting jobs' indexes are read once per credit, not once per enqueue: the
    statistics of one session, flushed on demand, count the scans."""
    indexes = "('ix_workerpool_jobs_due', 'ix_workerpool_jobs_waiting')"
    scans = (
        "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes "
        f"WHERE indexrelname IN {indexes}"
    )
    sql("SET stats_fetch_consistency = none")
    take = "SELECT workerpool_queue_take('large', 1, %s)"
    sql(take, LARGE)  # the first counts and grants
    sql("SELECT pg_stat_force_next_flush()")
    before = sql(scans)[0][0]
    for _ in range(50):
        assert sql(take, LARGE)[0][0] >= 0
    sql("SELECT pg_stat_force_next_flush()")
    assert sql(scans)[0][0] == before
    assert credit(sql) == LARGE // 100 - 50


def test_an_enqueue_that_finds_the_credit_locked_counts_instead_of_waiting(large, sql, dsn):
    large.enqueue("fill", {"n": 0})
    with psycopg.connect(dsn) as holder:  # a statement that holds the credit's row
        holder.execute("SELECT 1 FROM workerpool_queue_credits FOR UPDATE")
        done = threading.Event()
        thread = threading.Thread(target=lambda: (large.enqueue("fill", {"n": 1}), done.set()))
        thread.start()
        assert done.wait(30), "the enqueue waited for the credit's row"
        holder.rollback()
    thread.join()
    assert waiting(sql, "large") == 2
    assert credit(sql) == LARGE // 100  # the credit was left alone


def test_counting_and_taking_together_keep_the_bound(pool, sql):
    """Own-transaction enqueues take from the credit, caller-transaction ones count around
    it: together they stop at the bound, refused at most a credit early."""
    bound = 300
    pool.queue("mixed", max_pending=bound)
    pool.task(queue="mixed", name="mix")(lambda job: None)
    accepted = 0
    for n in range(bound + 10):
        try:
            if n % 3:
                pool.enqueue("mix", {"n": n})
            else:
                with pool.engine.begin() as conn:
                    pool.enqueue("mix", {"n": n}, conn=conn)
            accepted += 1
        except QueueFull:
            pass
    assert bound - bound // 100 <= waiting(sql, "mixed") == accepted <= bound
    with pytest.raises(QueueFull):
        pool.enqueue("mix", {"n": -1})


@pytest.mark.parametrize("adding, bound", [(0, 100), (-5, 100), (1, 0), (None, 100)])
def test_taking_nothing_or_less_is_refused_and_gives_no_credit(sql, adding, bound):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be positive"):
        sql("SELECT workerpool_queue_take('q', %s, %s)", adding, bound)
    assert credit(sql, "q") is None
