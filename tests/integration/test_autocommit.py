"""enqueue() without conn=: one autocommit statement, no pre-ping, and a dead pooled connection
detected without a round trip (workerpool.sql.autocommit), on real PostgreSQL.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql._psycopg_common import _PGDialect_common_psycopg

from tests.helpers.waiting import wait_until
from workerpool import IdempotencyConflict, WorkerPool
from workerpool.sql import autocommit


@pytest.fixture
def counted_pings(monkeypatch) -> list[int]:
    """Every ping the engine's pool really sends (installed before the engine exists)."""
    sent: list[int] = []
    ping = _PGDialect_common_psycopg.do_ping

    def counting(self, dbapi_connection):
        sent.append(1)
        return ping(self, dbapi_connection)

    monkeypatch.setattr(_PGDialect_common_psycopg, "do_ping", counting)
    return sent


@pytest.fixture
def app(db_url, counted_pings):
    pool = WorkerPool(db_url)

    @pool.task(queue="q")
    def work(job):
        return None

    yield pool
    pool.dispose()


def rows(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs")[0][0]


def backend_of(app: WorkerPool) -> int:
    with app.engine.connect() as conn:
        return conn.connection.driver_connection.info.backend_pid


def kept_backends(app: WorkerPool) -> list[int]:
    """The server processes of the connections kept between single writes."""
    return [
        conn.connection.driver_connection.info.backend_pid
        for conn, _ in autocommit._kept(app.engine).idle
    ]


def test_enqueue_sends_no_ping(app, sql, counted_pings):
    app.enqueue("work", {"i": 0})  # the pool's first connection: fresh, never pinged
    for i in range(1, 6):
        app.enqueue("work", {"i": i})
    assert counted_pings == [] and rows(sql) == 6
    for _ in range(2):  # every other checkout keeps its ping (the first is a fresh one)
        with app.engine.connect():
            pass
    assert counted_pings == [1]


def test_single_writes_keep_one_connection_checked_out_of_the_pool(app, sql):
    app.enqueue("work", {"i": 0})
    [backend] = kept_backends(app)
    for i in range(1, 20):
        app.enqueue("work", {"i": i})
    assert kept_backends(app) == [backend] and rows(sql) == 20
    assert app.engine.pool.checkedout() == 1  # within the pool's own limit
    app.dispose()
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
        timeout=10,
        message="dispose to close the kept connection",
    )


def test_a_pool_dropped_without_dispose_takes_its_kept_connection_with_it(db_url, sql):
    pool = WorkerPool(db_url)
    pool.task(queue="q", name="work")(lambda job: None)
    pool.enqueue("work", {})
    [backend] = kept_backends(pool)
    del pool
    gc.collect()
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
        timeout=10,
        message="the dropped pool's kept connection to be closed",
    )


def test_an_engine_disposed_and_made_again_is_not_held_by_its_pool(app, sql):
    engines = []
    for i in range(3):
        app.enqueue("work", {"i": i})
        engines.append(weakref.ref(app.engine))
        app.dispose()
    gc.collect()
    assert [engine() for engine in engines] == [None] * 3 and rows(sql) == 3


def test_writers_beyond_the_kept_ones_use_the_pool(app, sql):
    writers = autocommit.KEPT + 2
    together = threading.Barrier(writers, timeout=30)
    backends: list[int] = []
    results: list[object] = []

    def statement(conn):
        backends.append(conn.connection.driver_connection.info.backend_pid)
        together.wait()  # every writer holds its connection at the same time
        return conn.exec_driver_sql("SELECT 1").scalar()

    def writer() -> None:
        try:
            results.append(autocommit.write(app.engine, statement))
        except Exception as exc:  # the assertion below shows it
            results.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [1] * writers and len(set(backends)) == writers
    assert len(kept_backends(app)) == autocommit.KEPT  # the others went back to the pool
    assert app.engine.pool.checkedout() == autocommit.KEPT
    app.enqueue("work", {"i": 0})
    assert rows(sql) == 1 and len(kept_backends(app)) == autocommit.KEPT


def test_a_transaction_left_open_never_holds_the_next_write(app, sql):
    app.enqueue("work", {"i": 0})
    [backend] = kept_backends(app)
    autocommit.write(app.engine, lambda conn: conn.exec_driver_sql("BEGIN"))
    assert kept_backends(app) == [backend]  # SQLAlchemy knew of it: rolled back, kept
    app.enqueue("work", {"i": 1})
    assert rows(sql) == 2  # committed, seen from another session
    autocommit.write(app.engine, lambda conn: conn.connection.driver_connection.execute("BEGIN"))
    assert kept_backends(app) == [] and app.engine.pool.checkedout() == 0  # discarded
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend),
        timeout=10,
        message="the connection left in a transaction to be closed",
    )
    app.enqueue("work", {"i": 2})
    assert rows(sql) == 3


def test_a_taken_key_still_gets_its_holders_id_or_a_refusal(app, sql):
    first = app.enqueue("work", {"a": 1}, key="k")
    [backend] = kept_backends(app)
    assert app.enqueue("work", {"a": 1}, key="k") == first
    with pytest.raises(IdempotencyConflict):
        app.enqueue("work", {"a": 2}, key="k")
    assert rows(sql) == 1
    assert kept_backends(app) == [backend]  # the key's lookups leave it clean


def test_a_terminated_kept_connection_is_replaced_before_anything_is_sent(app, sql):
    app.enqueue("work", {"i": 0})
    [pid] = kept_backends(app)
    sql("SELECT pg_terminate_backend(%s)", pid)
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid),
        timeout=10,
        message="the backend to exit",
    )
    job_id = app.enqueue("work", {"i": 1})
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE id = %s", job_id) == [(1,)]
    assert rows(sql) == 2 and kept_backends(app) not in ([], [pid])


def test_a_forked_child_leaves_the_parents_kept_connection_alone(app, sql):
    app.enqueue("work", {"i": 0})
    [parent] = kept_backends(app)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's exit status is the assertion
        code = 1
        try:
            app.engines.forget_engine()  # what the supervisor's children do first
            app.enqueue("work", {"i": 1})
            code = 0 if kept_backends(app) not in ([], [parent]) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    app.enqueue("work", {"i": 2})  # on the parent's kept connection, still its own
    assert kept_backends(app) == [parent] and rows(sql) == 3


def test_a_statement_that_could_not_be_sent_is_retried_once_on_a_pinged_connection(
    app, counted_pings
):
    calls = []

    def statement(conn):
        calls.append(1)
        if len(calls) == 1:
            raise psycopg.OperationalError("sending query and params failed: broken pipe")
        return conn.exec_driver_sql("SELECT 42").scalar()

    with app.engine.connect():
        pass  # a pooled connection, so the retry's checkout is not a fresh one
    counted_pings.clear()
    assert autocommit.write(app.engine, statement) == 42
    assert len(calls) == 2 and counted_pings == []  # the retry got a new connection: fresh


def test_a_failure_after_the_statement_was_sent_is_never_retried(app, sql):
    # The server ends the session while running the insert: in autocommit such a statement
    # might have committed before the connection broke, so it must run at most once.
    sql("CREATE SEQUENCE attempts")
    sql("""CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN PERFORM nextval('attempts'); PERFORM pg_terminate_backend(pg_backend_pid());
           RETURN NEW; END $$""")
    sql("CREATE TRIGGER die BEFORE INSERT ON workerpool_jobs FOR EACH ROW EXECUTE FUNCTION die()")
    with pytest.raises(sa_exc.OperationalError):
        app.enqueue("work", {"i": 1})
    assert sql("SELECT last_value FROM attempts") == [(1,)]
    sql("DROP TRIGGER die ON workerpool_jobs")
    app.enqueue("work", {"i": 2})  # the broken connection left the pool
    assert rows(sql) == 1


def test_database_errors_are_sqlalchemy_errors_as_before(app):
    with pytest.raises(sa_exc.IntegrityError):  # the database's own bound on the payload
        autocommit.write(
            app.engine,
            lambda conn: conn.exec_driver_sql(
                "INSERT INTO workerpool_jobs (queue, task, payload) VALUES ('q', 'work', '[]')"
            ),
        )


def test_every_other_checkout_pings_and_replaces_a_terminated_connection(app, sql, counted_pings):
    pid = backend_of(app)
    sql("SELECT pg_terminate_backend(%s)", pid)
    wait_until(
        lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid),
        timeout=10,
        message="the backend to exit",
    )
    with app.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1
        assert conn.connection.driver_connection.info.backend_pid != pid
    assert counted_pings  # the dead connection's ping failed, and the pool replaced it
