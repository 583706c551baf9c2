"""Bounded queues: an enqueue that would take a queue past ``max_pending`` jobs waiting to run
raises QueueFull with nothing written (single, many, async, in a caller's transaction, SQL),
and the queue accepts again once it drained."""

from __future__ import annotations

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
    with pytest.raises(QueueFull, match=r"^queue small is full: 3 jobs waiting to run, bound 3"):
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
