"""Every hot statement walks its index and stops at its limit, even under stale statistics.

The table is analyzed while empty (as right after ``workerpool migrate``), then loaded with a
200k-row backlog, leases and history, then VACUUMed without ANALYZE: the VACUUM refreshes the
row count while ``pg_stats`` stays empty, which is what made the planner bitmap-scan and sort
the whole backlog on every claim. Each statement is explained the way the worker runs it:
custom-planned (its parameters known) and generic-planned (the plan a prepared statement caches
after its fifth run), on connections with exactly the settings the worker, the maintenance
child and the releaser use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.helpers.db import libpq
from tests.helpers.plans import (
    ARM_INDEXES,
    EXPLAIN,
    LIMIT,
    LOAD,
    PENDING,
    SESSIONS,
    index_scans,
    loaded,
    offending,
    rolled_back,
    statements,
)
from workerpool.sql.recovery import RECOVER_BATCH

pytestmark = pytest.mark.slow  # big data: a 200,000-row backlog and its history, for EXPLAIN


@pytest.fixture(scope="module")
def stale_url(server_url: URL, template_db: str) -> Iterator[URL]:
    with loaded(server_url, template_db, LOAD) as url:
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            stats = conn.execute(
                "SELECT count(*) FROM pg_stats WHERE tablename = 'workerpool_jobs'"
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT reltuples FROM pg_class WHERE relname = 'workerpool_jobs'"
            ).fetchone()[0]
        assert stats == 0, "the premise: no column statistics"
        assert rows > PENDING / 2, "the premise: VACUUM refreshed the row count"
        yield url


@pytest.fixture(scope="module")
def fresh_url(server_url: URL, template_db: str) -> Iterator[URL]:
    """The same rows with statistics that know them: a generic plan then prices ``LIMIT $n`` at
    a tenth of the backlog, which is where a hash join over the whole table looks cheap."""
    with loaded(server_url, template_db, [*LOAD, "ANALYZE workerpool_jobs"]) as url:
        yield url


@pytest.fixture(scope="module", params=["stale", "fresh"])
def loaded_url(request) -> URL:
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(scope="module")
def hot_statements(loaded_url: URL) -> dict[str, tuple[str, dict[str, Any]]]:
    return statements(loaded_url)


@pytest.mark.parametrize("session", list(SESSIONS))
@pytest.mark.parametrize("planning", list(EXPLAIN))
@pytest.mark.parametrize(
    "statement",
    [
        "claim",
        "claim alone",
        "claim limited",
        "claim limited shared",
        "claim per key",
        "claim per key alone",
        "complete",
        "complete settling",
        "complete settling with results",
        "settle batches (lock)",
        "settle batches (finish)",
        "renew",
        "return_unstarted",
        "return_unheld",
        "give_back",
        "reclaim_from_dead_worker",
        "sweep_abandoned",
        "recover_stale",
        "prune_finished",
    ],
)
def test_hot_statement_stops_at_its_limit_under_stale_or_fresh_statistics(
    loaded_url, hot_statements, session, planning, statement
):
    make_engine, opening = SESSIONS[session]
    sql, params = hot_statements[statement]
    engine = make_engine(loaded_url)
    try:
        with rolled_back(engine, opening) as raw:
            plan = EXPLAIN[planning](raw, sql, params)
    finally:
        engine.dispose()
    assert offending(plan) == [], plan
    if statement in ARM_INDEXES:
        scans = index_scans(plan)
        assert ARM_INDEXES[statement] <= set(scans), scans
        # each arm stops at the limit instead of reading the backlog or every stale lease
        bound = RECOVER_BATCH if statement == "recover_stale" else LIMIT
        for index in ARM_INDEXES[statement] & {
            "ix_workerpool_jobs_due",
            "ix_workerpool_jobs_suspects",
            "ix_workerpool_jobs_leased",
        }:
            if index != "ix_workerpool_jobs_leased" or statement == "recover_stale":
                assert scans[index] <= bound, scans
        if statement.startswith("claim"):
            assert plan["Actual Rows"] == (1 if statement.endswith("alone") else LIMIT)
