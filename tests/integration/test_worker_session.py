"""The worker's main connection, kept for the process's life, must not accumulate state."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import event

from workerpool import sql as queries
from workerpool.model.limits import claim_limits
from workerpool.runtime.worker import session as worker_session
from workerpool.runtime.worker.session import Session


def test_single_statements_on_the_kept_connection_leave_nothing_behind(pool):
    pool.queue("q")
    session = Session(pool.url, "q", concurrency=1)
    session.open()
    try:
        for _ in range(200):
            with session.single_statement() as conn:
                assert conn.connection.dbapi_connection.autocommit is True
                conn.exec_driver_sql("SELECT 1")
        with session.transaction() as conn:  # and the connection is transactional again
            conn.exec_driver_sql("SELECT 1")
            assert conn.connection.dbapi_connection.autocommit is False
        record = session._main_connection().connection._connection_record
        # what SQLAlchemy runs when the connection returns to the pool: a kept connection never
        # does, so anything left here per statement grows for as long as the worker runs
        assert len(record.finalize_callback) <= 2
    finally:
        session.close()


def test_a_limited_claim_on_the_kept_connection_is_planned_once(pool):
    """A prepared limited claim keeps its generic plan instead of being planned on every call
    (a plan of the per-key claim costs the server about a millisecond, more than running it);
    the worker's other statements keep PostgreSQL's own choice."""
    pool.queue("q")
    pool.task(lambda job: None, name="t", queue="q", concurrency_limit=1)
    limits = claim_limits(pool.registry.queue_spec("q"), pool.tasks)
    pool.enqueue_many([("t", {"n": n}) for n in range(200)])
    session = Session(pool.url, "q", concurrency=1)
    session.open()
    try:
        for _ in range(12):
            with session.transaction() as conn:
                queries.claim(
                    conn,
                    queue="q",
                    worker="me",
                    limit=10,
                    task_versions={"t": 1},
                    limits=limits,
                )
            with session.transaction() as conn:
                assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "auto"
        with session.transaction() as conn:
            plans = conn.exec_driver_sql(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE strpos(statement, 'UPDATE workerpool_jobs SET state') > 0"
            ).all()
        assert len(plans) == 1 and plans[0][1] == 0 and plans[0][0] >= 5, plans
    finally:
        session.close()


def test_a_claim_planned_afresh_under_a_backlog_gets_its_generic_plan_back(pool, sql, monkeypatch):
    """PostgreSQL never rebuilds a generic plan it has turned down: once an ANALYZE saw a
    backlog, a connection plans every claim (0.2 ms of server CPU each) for as long as it
    lives. The main connection is renewed, so the claim is planned once again soon after the
    backlog is gone."""
    monkeypatch.setattr(worker_session, "MAIN_CONNECTION_LIFETIME", 3600.0)
    pool.queue("q")
    pool.task(lambda job: None, name="t", queue="q")
    session = Session(pool.url, "q", concurrency=1)
    session.open()

    def claims(count: int) -> None:
        for _ in range(count):
            with session.transaction() as conn:
                rows = queries.claim(conn, queue="q", worker="me", limit=10, task_versions={"t": 1})
                queries.complete(conn, "me", [(row.id, row.attempts) for row in rows])

    def plans() -> tuple[int, int]:
        with session.transaction() as conn:
            found = conn.exec_driver_sql(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
            ).all()
        return found[0] if found else (0, 0)

    try:
        sql(
            "INSERT INTO workerpool_jobs (queue, task, state) SELECT 'q', 't', 'done'"
            " FROM generate_series(1, 20000)"
        )
        sql("ANALYZE workerpool_jobs")
        claims(15)
        assert plans()[0] > 0  # no backlog: one generic plan
        sql(
            "INSERT INTO workerpool_jobs (queue, task)"
            " SELECT 'q', 't' FROM generate_series(1, 50000)"
        )
        sql("ANALYZE workerpool_jobs")
        claims(30)
        assert plans()[1] >= 15  # the backlog's statistics: every claim planned
        sql("DELETE FROM workerpool_jobs WHERE state = 'pending'")
        sql("ANALYZE workerpool_jobs")
        monkeypatch.setattr(worker_session, "MAIN_CONNECTION_LIFETIME", 1.0)
        deadline = time.monotonic() + 20
        generic, custom = plans()
        while not (generic > 0 and custom <= 5) and time.monotonic() < deadline:
            claims(5)
            generic, custom = plans()
        assert generic > 0 and custom <= 5, (generic, custom)
    finally:
        session.close()


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pgbouncer"])
def test_every_transaction_is_bounded_and_sets_its_limits_only_behind_pgbouncer(pool, pooled):
    """A connection of ours starts with the limits; setting them again in each transaction
    would cost the main loop a round trip per pass. Behind PgBouncer they are set locally."""
    pool.queue("q")
    session = Session(pool.url, "q", concurrency=1, pooled=pooled)
    session.open()
    sent: list[str] = []
    event.listen(session.engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    try:
        for main_loop in (True, False):
            with session.transaction(main_loop=main_loop) as conn:
                shown = [
                    conn.exec_driver_sql(f"SHOW {name}").scalar()
                    for name in (
                        "statement_timeout",
                        "lock_timeout",
                        "idle_in_transaction_session_timeout",
                    )
                ]
            assert shown == ["15s", "3s", "15s"], (main_loop, shown)
        assert sum("set_config" in statement for statement in sent) == (2 if pooled else 0)
    finally:
        session.close()
