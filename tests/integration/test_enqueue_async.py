"""Async enqueue: on the caller's AsyncConnection the job exists iff its transaction commits;
the same checks, errors and NOTIFY as the sync path; the pool's own async engine otherwise."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import text

from tests.helpers.asyncio_engine import on_own_async_engine
from tests.helpers.bad_inputs import BAD_INPUTS
from workerpool import IdempotencyConflict, InvalidJob, WorkerPool


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    @pool.task(queue="email", max_attempts=3, version=2)
    def send(job):
        return None

    return pool


def count(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs")[0][0]


def test_committed_with_the_business_write(app, sql):
    sql("CREATE TABLE users (id int primary key)")

    async def body(engine):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO users VALUES (1)"))
            return await app.enqueue_async("send", {"user_id": 1}, conn=conn)

    job_id = on_own_async_engine(app, body)
    assert sql("SELECT count(*) FROM users") == [(1,)]
    assert sql("SELECT id, task, payload, payload_version, max_attempts FROM workerpool_jobs") == [
        (job_id, "send", {"user_id": 1}, 2, 3)
    ]


def test_rolled_back_leaves_no_job(app, sql):
    async def body(engine):
        async with engine.connect() as conn:
            trans = await conn.begin()
            await app.enqueue_async("send", {"user_id": 1}, conn=conn)
            await app.enqueue_many_async([("send", {"n": 2})], conn=conn)
            assert (await conn.execute(text("SELECT count(*) FROM workerpool_jobs"))).scalar() == 2
            await trans.rollback()

    on_own_async_engine(app, body)
    assert count(sql) == 0


def test_keys_return_the_existing_job_and_conflicts_raise(app, sql):
    async def body(engine):
        first = await app.enqueue_async("send", {"u": 1}, key="welcome:1")
        again = await app.enqueue_async("send", {"u": 1}, key="welcome:1")
        many = await app.enqueue_many_async(
            [("send", {"n": 1}), ("send", {"u": 1}, {"key": "welcome:1"})]
        )
        assert again == first and many[1] == first
        with pytest.raises(IdempotencyConflict, match="welcome:1"):
            await app.enqueue_async("send", {"u": 2}, key="welcome:1")
        with pytest.raises(IdempotencyConflict):
            async with engine.begin() as conn:
                await app.enqueue_many_async(
                    [("send", {"n": 9}), ("send", {"u": 2}, {"key": "welcome:1"})], conn=conn
                )
        return first

    on_own_async_engine(app, body)
    assert count(sql) == 2  # the first job and the batch's unkeyed row; the conflicting batch none
    app.dispose()


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_before_any_write(app, sql, args, options, error, message):
    async def body(engine):
        async with engine.begin() as conn:
            with pytest.raises(error, match=message):
                await app.enqueue_async(*args, conn=conn, **options)
            with pytest.raises(error):
                await app.enqueue_many_async([("send", {"ok": True}), (*args, options)], conn=conn)
            assert (await conn.execute(text("SELECT count(*) FROM workerpool_jobs"))).scalar() == 0

    on_own_async_engine(app, body)
    assert app.engines._async_engine is None  # refused before the pool's own engine was even made


def test_the_wrong_kind_of_connection_is_refused_by_name(app, sql):
    with app.engine.begin() as sync_conn:
        with pytest.raises(InvalidJob, match=r"AsyncConnection.*use enqueue for a Connection"):
            asyncio.run(app.enqueue_async("send", {}, conn=sync_conn))
        with pytest.raises(InvalidJob, match="AsyncConnection"):
            asyncio.run(app.enqueue_many_async([("send", {})], conn="not a connection"))

    async def body(engine):
        async with engine.begin() as conn:
            with pytest.raises(
                InvalidJob,
                match=r"for an AsyncConnection use the call's _async"
                r" twin \(enqueue_async",
            ):
                app.enqueue("send", {}, conn=conn)

    on_own_async_engine(app, body)
    with pytest.raises(InvalidJob, match="iterable"):
        asyncio.run(app.enqueue_many_async({"send": {}}))
    assert count(sql) == 0


def test_notify_reaches_a_listener_on_commit_only(app, dsn):
    async def body(engine):
        async with engine.connect() as conn:
            trans = await conn.begin()
            await app.enqueue_async("send", {"n": 0}, conn=conn)
            await trans.rollback()
        async with engine.begin() as conn:
            await app.enqueue_many_async([("send", {"n": i}) for i in range(20)], conn=conn)
        await app.enqueue_async("send", {"n": 99})

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN workerpool_jobs")
        on_own_async_engine(app, body)
        notes = list(listener.notifies(timeout=1.0, stop_after=3))
    assert [n.payload for n in notes] == ["email", "email"]  # the batch's one, the single's one
    app.dispose()


def test_the_pools_own_async_engine_is_made_lazily_and_disposed(app, sql):
    async def main():
        ids = [await app.enqueue_async("send", {"n": 1})]
        ids += await app.enqueue_many_async([("send", {"n": i}) for i in range(300)])
        assert await app.enqueue_many_async([]) == []
        await app.dispose_async()
        assert app.engines._async_engine is None
        ids.append(await app.enqueue_async("send", {"n": 2}))  # a new engine, made again
        return ids

    ids = asyncio.run(main())
    assert ids == sorted(ids) and len(set(ids)) == 302
    assert count(sql) == 302
    app.dispose()  # no loop running: closes the async engine too
    assert app.engines._async_engine is None
