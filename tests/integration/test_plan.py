"""The claim's plan must not read the backlog: a guard against regressing to a seq scan."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql

from workerpool import WorkerPool
from workerpool import sql as queries


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def explain_claim(pool: WorkerPool) -> dict:
    stmt = queries.claim_statement(
        queue="q",
        worker="me",
        limit=100,
        task_versions={"work": 1},
    )
    compiled = stmt.compile(
        dialect=postgresql.psycopg.dialect(), compile_kwargs={"render_postcompile": True}
    )
    with pool.engine.connect() as conn:
        trans = conn.begin()
        result = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + str(compiled), compiled.params
        ).scalar()
        trans.rollback()
    return result[0]["Plan"]


@pytest.mark.slow
def test_claim_uses_the_partial_indexes_with_a_million_finished_rows(pool, sql):
    sql("""INSERT INTO workerpool_jobs (queue, task, state, attempts, finished_at)
           SELECT 'q', 'work', 'done', 1, now() FROM generate_series(1, 1000000)""")
    sql("""INSERT INTO workerpool_jobs (queue, task)
           SELECT 'q', 'work' FROM generate_series(1, 20000)""")
    sql("""INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at)
           SELECT 'q', 'work', 'processing', 1, 'w', now() FROM generate_series(1, 2000)""")
    sql("ANALYZE workerpool_jobs")
    plan = explain_claim(pool)
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "workerpool_jobs"]
    assert not [n for n in scans if "Seq Scan" in n["Node Type"]], plan
    indexes = {n.get("Index Name") for n in scans}
    assert "ix_workerpool_jobs_due" in indexes, indexes
    # The due arm stops at the limit instead of reading the 20k backlog.
    due = [n for n in scans if n.get("Index Name") == "ix_workerpool_jobs_due"]
    assert all(n["Actual Rows"] <= 4 * 100 for n in due), due
    assert plan["Actual Rows"] == 100
