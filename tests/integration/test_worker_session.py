"""The worker's main connection, kept for the process's life, must not accumulate state."""

from __future__ import annotations

from workerpool.worker.session import Session


def test_single_statements_on_the_kept_connection_leave_nothing_behind(pool):
    pool.queue("q")
    session = Session(pool, "q", concurrency=1)
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
