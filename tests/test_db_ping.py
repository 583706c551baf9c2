"""Pooled connections: pinged before use only after sitting idle (a ping is a round trip)."""

from __future__ import annotations

import pytest
from sqlalchemy import exc, text

from workerpool import db


def backend_pid(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


def age_pooled_connections(engine, seconds: float) -> None:
    """Make every idle pooled connection look idle for ``seconds`` longer (no sleeping)."""
    for record in list(engine.pool._pool.queue):
        record.info["workerpool_idle_since"] -= seconds


def kill(sql, pid: int) -> None:
    assert sql("SELECT pg_terminate_backend(%s)", pid) == [(True,)]


def test_a_connection_killed_while_idle_is_replaced_before_use(pool, sql):
    engine = pool.engine
    dead = backend_pid(engine)
    kill(sql, dead)
    age_pooled_connections(engine, db.PING_AFTER_IDLE + 1)
    fresh = backend_pid(engine)  # the ping failed, the pool reconnected: no error surfaces
    assert fresh != dead


def test_a_connection_used_a_moment_ago_is_not_pinged(pool, sql):
    engine = pool.engine
    dead = backend_pid(engine)
    kill(sql, dead)
    # within PING_AFTER_IDLE of its last use the connection is trusted: the statement meets the
    # dead backend (this is the price of skipping the round trip), and the pool recovers
    with pytest.raises(exc.OperationalError):
        backend_pid(engine)
    assert backend_pid(engine) != dead
