"""Enqueue: transactional, idempotent, bulk, and every bad input refused before a write."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from tests.helpers.bad_inputs import BAD_INPUTS
from workerpool import (
    IdempotencyConflict,
    PayloadError,
    WorkerPool,
)


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    @pool.task(queue="email", max_attempts=3, version=2)
    def send(job):
        return None

    @pool.task(queue="email", name="reset")
    def send_reset(job):
        return None

    return pool


def count(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs")[0][0]


def test_enqueue_writes_a_pending_row_with_the_task_settings(app, sql):
    job_id = app.enqueue("send", {"user_id": 7})
    row = sql(
        "SELECT queue, task, payload, payload_version, state, attempts, max_attempts,"
        " run_at <= now() FROM workerpool_jobs WHERE id = %s",
        job_id,
    )[0]
    assert row == ("email", "send", {"user_id": 7}, 2, "pending", 0, 3, True)


def test_enqueue_accepts_the_decorated_function(app, sql):
    from_function = app.enqueue(app.tasks["reset"].fn, {"a": 1})
    assert sql("SELECT task FROM workerpool_jobs WHERE id = %s", from_function) == [("reset",)]


def test_transactional_enqueue_rolled_back_leaves_no_job(app, sql):
    with app.engine.connect() as conn:
        trans = conn.begin()
        app.enqueue("send", {"user_id": 1}, conn=conn)
        conn.execute(text("SELECT 1"))
        trans.rollback()
    assert count(sql) == 0


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_an_enqueue_first_on_a_connection_without_begin_is_in_its_transaction(app, sql, end):
    """SQLAlchemy begins a transaction on a connection's first statement (autobegin): an
    enqueue that is that first statement must be in it, so the caller's commit() keeps it
    and rollback() takes it back."""
    with app.engine.connect() as conn:
        app.enqueue("send", {"user_id": 1}, conn=conn)
        getattr(conn, end)()
    assert count(sql) == (1 if end == "commit" else 0)


def test_transactional_enqueue_committed_with_the_business_write(app, sql):
    sql("CREATE TABLE users (id int primary key)")
    with app.engine.begin() as conn:
        conn.execute(text("INSERT INTO users VALUES (1)"))
        job_id = app.enqueue("send", {"user_id": 1}, conn=conn)
    assert sql("SELECT count(*) FROM users") == [(1,)]
    assert sql("SELECT id FROM workerpool_jobs") == [(job_id,)]


def test_same_key_returns_the_existing_job_and_writes_nothing(app, sql):
    first = app.enqueue("send", {"user_id": 1}, key="welcome:1")
    second = app.enqueue("send", {"user_id": 1}, key="welcome:1")
    assert first == second
    assert count(sql) == 1


def test_same_key_with_a_different_payload_is_a_conflict(app, sql):
    app.enqueue("send", {"user_id": 1}, key="welcome:1")
    with pytest.raises(IdempotencyConflict, match="welcome:1"):
        app.enqueue("send", {"user_id": 2}, key="welcome:1")
    assert count(sql) == 1


def test_enqueue_many_returns_ids_in_order_and_honours_keys(app, sql):
    existing = app.enqueue("send", {"n": 0}, key="k0")
    ids = app.enqueue_many(
        [("send", {"n": i}, {"key": f"k{i}"} if i % 2 == 0 else {}) for i in range(10)]
    )
    assert ids[0] == existing
    assert len(set(ids)) == 10
    rows = dict(sql("SELECT id, (payload->>'n')::int FROM workerpool_jobs"))
    assert [rows[i] for i in ids] == list(range(10))


def test_enqueue_many_with_a_conflicting_key_writes_nothing(app, sql):
    app.enqueue("send", {"n": 0}, key="k0")
    with pytest.raises(IdempotencyConflict):
        with app.engine.begin() as conn:
            app.enqueue_many([("send", {"n": 1}), ("send", {"n": 99}, {"key": "k0"})], conn=conn)
    assert count(sql) == 1


def test_enqueue_many_sends_one_notification(app, dsn):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN workerpool_jobs")
        app.enqueue_many([("send", {"n": i}) for i in range(50)])
        notes = list(listener.notifies(timeout=1.0))
    assert [n.payload for n in notes] == ["email"]


def test_delay_and_run_at_use_the_database_clock(app, sql):
    later = app.enqueue("send", {}, delay=3600)
    at = datetime(2031, 1, 1, tzinfo=UTC)
    fixed = app.enqueue("send", {}, run_at=at)
    rows = dict(sql("SELECT id, run_at - now() > interval '59 minutes' FROM workerpool_jobs"))
    assert rows[later] is True
    assert sql("SELECT run_at FROM workerpool_jobs WHERE id = %s", fixed) == [(at,)]


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_by_name_and_nothing_is_written(
    app, sql, args, options, error, message
):
    with pytest.raises(error, match=message):
        app.enqueue(*args, **options)
    with pytest.raises(error):
        app.enqueue_many([("send", {"ok": True}), (*args, options)])
    assert count(sql) == 0


def test_deeply_nested_payload_is_a_payload_error_not_recursion(app, sql):
    deep: dict = {}
    node = deep
    for _ in range(10_000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(PayloadError, match="nested deeper"):
        app.enqueue("send", deep)
    assert count(sql) == 0


def test_database_refuses_rows_that_bypass_the_client(sql):
    import psycopg

    with pytest.raises(psycopg.errors.CheckViolation):
        sql("INSERT INTO workerpool_jobs (queue, task, payload) VALUES ('q', 't', '[1]')")
    with pytest.raises(psycopg.errors.CheckViolation):
        sql(
            "INSERT INTO workerpool_jobs (queue, task, attempts, max_attempts) VALUES ('q','t',6,5)"
        )
    with pytest.raises(psycopg.errors.CheckViolation):
        sql("INSERT INTO workerpool_jobs (queue, task, state) VALUES ('q', 't', 'running')")


def test_timedelta_delay(app, sql):
    job_id = app.enqueue("send", {}, delay=timedelta(minutes=5))
    assert sql(
        "SELECT run_at > now() + interval '4 minutes' FROM workerpool_jobs WHERE id=%s", job_id
    ) == [(True,)]


def test_text_round_trips_exactly_through_the_bulk_insert(app, sql):
    odd = 'clé-ü-😀-\\u0041-"q"-\n-\t-\''
    ids = app.enqueue_many([("send", {"s": odd, odd: [odd]}, {"key": odd}), ("send", {"n": 1})])
    row = sql("SELECT key, payload FROM workerpool_jobs WHERE id = %s", ids[0])[0]
    assert row == (odd, {"s": odd, odd: [odd]})
    assert app.enqueue("send", {"s": odd, odd: [odd]}, key=odd) == ids[0]


def test_threads_that_enqueue_first_at_once_share_one_engine(db_url, sql):
    pool = WorkerPool(db_url)
    pool.task(lambda job: None, queue="q", name="first")
    start = threading.Barrier(8)
    engines = []

    def first_enqueue() -> None:
        start.wait()
        engines.append(pool.engine)
        pool.enqueue("first", {})

    threads = [threading.Thread(target=first_enqueue) for _ in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads inside the engine's creation, as a busy app does
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
        pool.dispose()
    assert len({id(engine) for engine in engines}) == 1  # one engine, so no pool left undisposed
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 8
