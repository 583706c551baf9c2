"""The asyncio surface matches the sync one: chain, workflow, job, batch status and results,
signal, cancel, pause and resume, on the caller's AsyncConnection (in its transaction: gone on
a rollback) or on the pool's own async engine; and the sync calls name the async twin."""

from __future__ import annotations

import inspect

import pytest

from tests.helpers.asyncio_engine import on_own_async_engine
from workerpool import InvalidJob, WorkerPool, testing
from workerpool.client import WorkerPool as Client


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("shop")

    @pool.task(queue="shop")
    def charge(job):
        return {"charged": job.payload.get("order")}

    @pool.task(queue="shop")
    def receipt(job):
        return "sent"

    return pool


def total(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs")[0][0]


def test_every_sync_call_has_its_async_twin():
    for name in (
        "enqueue",
        "enqueue_many",
        "chain",
        "job",
        "result",
        "batch",
        "batch_status",
        "batch_results",
        "signal",
        "cancel",
        "pause",
        "resume",
    ):
        assert hasattr(Client, f"{name}_async"), name
    for name in ("chain", "signal", "cancel", "pause", "resume"):
        assert "conn" in inspect.signature(getattr(Client, f"{name}_async")).parameters, name


def test_chain_and_workflow_in_the_callers_transaction(app, sql):
    async def body(engine):
        async with engine.connect() as conn:
            outer = await conn.begin()
            await app.chain_async([("charge", {"order": 1}), ("receipt", {})], conn=conn)
            wf = app.workflow(conn=conn)
            wf.step("a", "charge", {"order": 2})
            wf.step("b", "receipt", {}, after=["a"])
            await wf.run_async()
            await outer.rollback()
        async with engine.begin() as conn:
            ids = await app.chain_async(
                [("charge", {"order": 3}), ("receipt", {})], conn=conn, key="order-3"
            )
            again = await app.chain_async(
                [("charge", {"order": 3}), ("receipt", {})], conn=conn, key="order-3"
            )
        own = await app.chain_async([("charge", {"order": 4}), ("receipt", {})])
        wf = app.workflow()
        wf.step("a", "charge", {"order": 5})
        wf.step("b", "receipt", {}, after=["a"])
        named = await wf.run_async()
        return ids, again, own, named

    ids, again, own, named = on_own_async_engine(app, body)
    assert again == ids and len(own) == 2 and set(named) == {"a", "b"}
    assert total(sql) == 6  # the rolled-back chain and workflow left nothing
    assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", ids[1]) == [("waiting",)]


def test_job_batch_status_and_results(app, sql):
    with app.batch() as batch:
        members = [batch.enqueue("charge", {"order": n}) for n in range(3)]
    testing.drain(app)

    async def body(engine):
        info = await app.job_async(members[0])
        status = await app.batch_status_async(batch.id)
        results = [m async for m in app.batch_results_async(batch.id, page_size=2)]
        return info, status, results

    info, status, results = on_own_async_engine(app, body)
    assert (info.state, info.result) == ("done", {"charged": 0})
    assert status == app.batch_status(batch.id)
    assert results == list(app.batch_results(batch.id, page_size=2))


def test_signal_cancel_pause_resume_on_a_callers_connection(app, sql):
    job_id = app.enqueue("charge", {"order": 9})

    async def body(engine):
        async with engine.connect() as conn:
            outer = await conn.begin()
            await app.signal_async("paid", {"order": 9}, conn=conn)
            await app.cancel_async([job_id], conn=conn, reason="changed my mind")
            await app.pause_async("shop", conn=conn)
            await outer.rollback()
        rolled_back = (
            sql("SELECT count(*) FROM workerpool_signals")[0][0],
            sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)[0][0],
        )
        sent = await app.signal_async("paid", {"order": 9})
        cancelled = await app.cancel_async([job_id], reason="changed my mind")
        await app.pause_async("shop", by="ops")
        paused = sql("SELECT paused FROM workerpool_queues WHERE queue = 'shop'")
        async with engine.begin() as conn:
            await app.resume_async("shop", conn=conn)
        return rolled_back, sent, cancelled, paused

    rolled_back, sent, cancelled, paused = on_own_async_engine(app, body)
    assert rolled_back == (0, "pending")
    assert sent is not None and cancelled.cancelled == [job_id]
    assert paused == [(True,)]
    assert sql("SELECT paused FROM workerpool_queues WHERE queue = 'shop'") == [(False,)]
    assert [row[0] for row in sql("SELECT action FROM workerpool_audit ORDER BY id")] == [
        "cancel",
        "pause",
        "resume",
    ]


def test_a_sync_call_given_an_async_connection_names_the_twin(app, sql):
    async def body(engine):
        async with engine.begin() as conn:
            with pytest.raises(InvalidJob, match="chain_async"):
                app.chain([("charge", {}), ("receipt", {})], conn=conn)
            with pytest.raises(InvalidJob, match="AsyncConnection"):
                await app.cancel_async([1], conn=object())

    on_own_async_engine(app, body)
    assert total(sql) == 0
