"""pool.batch_async: the batch of test_batches.py from asyncio, on the pool's async engine or
a caller's AsyncConnection, against real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import batch_app
from tests.helpers.batch_app import callbacks
from workerpool import BatchClosed, InvalidJob, UnknownTask, WorkerPool, testing


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    return batch_app.declare(pool)


def run(coro):
    return asyncio.run(coro)


def test_members_and_callbacks_as_with_the_sync_batch(app, sql):
    async def fan_out():
        async with app.batch_async(
            on_complete="report", on_success="succeeded", payload={"p": 1}
        ) as batch:
            ids = [await batch.enqueue("member", {"n": n}) for n in range(2)]
            ids += await batch.enqueue_many([("member", {"n": n}) for n in range(2, 5)])
            keyed = await batch.enqueue("member", {"n": 9}, key="k9")
            assert await batch.enqueue("member", {"n": 9}, key="k9") == keyed
        await app.dispose_async()
        return batch, [*ids, keyed]

    batch, ids = run(fan_out())
    assert batch.member_ids[:6] == ids and batch.outside == [] and not batch.reopened
    assert app.batch_status(batch.id).total == 6
    assert len(testing.drain(app, "q")) == 6
    assert callbacks(sql, batch.id) == [("report", "pending"), ("succeeded", "pending")]


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_in_a_callers_async_transaction_the_caller_decides(app, sql, end):
    async def fan_out():
        async with app.async_engine.connect() as conn:
            await conn.begin()
            async with app.batch_async(on_complete="report", conn=conn) as batch:
                await batch.enqueue_many([("member", {"n": n}) for n in range(3)])
            await getattr(conn, end)()
        await app.dispose_async()
        return batch

    batch = run(fan_out())
    kept = sql("SELECT count(*) FROM workerpool_batches WHERE id = %s", batch.id)[0][0]
    members = sql("SELECT count(*) FROM workerpool_jobs WHERE batch_id = %s", batch.id)[0][0]
    assert (kept, members) == ((1, 3) if end == "commit" else (0, 0))


def test_a_failing_block_writes_nothing(app, sql):
    async def fan_out():
        async with app.batch_async(on_complete="report") as batch:
            await batch.enqueue("member", {"n": 1})
            raise RuntimeError("the coordinator failed")

    with pytest.raises(RuntimeError):
        run(fan_out())
    run(app.dispose_async())
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
    assert sql("SELECT count(*) FROM workerpool_batches") == [(0,)]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"on_complete": "nope"}, UnknownTask, "nope"),
        ({"conn": object()}, InvalidJob, "AsyncConnection"),
    ],
)
def test_bad_input_is_refused_by_name_before_anything_is_written(app, sql, options, error, match):
    with pytest.raises(error, match=match):
        app.batch_async(**options)
    assert sql("SELECT count(*) FROM workerpool_batches") == [(0,)]


def test_a_member_outside_the_block_is_refused(app, sql):
    batch = app.batch_async(on_complete="report")
    with pytest.raises(BatchClosed):
        run(batch.enqueue("member", {}))
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]
