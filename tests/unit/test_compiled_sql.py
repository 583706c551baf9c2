"""Statements compiled once (``workerpool.sql.compiled.driver_sql``): the parameters they carry
come with them, and a required one the caller forgets is an error, never a NULL."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql

from workerpool.sql.claim import CLAIM_LIMIT, claim_statement
from workerpool.sql.compiled import driver_sql
from workerpool.sql.results import _COMPLETE, Settled

DIALECT = postgresql.psycopg.dialect()


def test_a_required_parameter_is_left_for_the_caller():
    sql, params = driver_sql(DIALECT, _COMPLETE[False])
    assert {"lease_ids", "lease_attempts", "lease_worker"}.isdisjoint(params)
    assert "%(lease_ids)s" in sql  # psycopg refuses to send it without one


def test_the_values_a_statement_carries_come_with_it():
    statement = claim_statement(
        queue="q",
        worker="w",
        limit=7,
        task_versions={"t": 1},
    )
    _, params = driver_sql(DIALECT, statement)
    assert params[CLAIM_LIMIT] == 7
    assert "w" in params.values() and ["t"] in params.values()


def test_the_completing_write_returns_settleds_fields_in_their_order():
    """``complete_settling`` builds each ``Settled`` from its row by position."""
    for statement in _COMPLETE.values():
        names = [column.name for column in statement.selected_columns]
        assert names == ["id", "batch_id", "awaited", "has_dependents"]
        assert len(names) == len(Settled._fields)
