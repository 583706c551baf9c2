"""The claims' plans where statistics mislead in other ways than in test_plan_stale_statistics:
a per-key probe on statistics that saw nothing running, and the generic plans of the claims on a
table that is nearly all backlog."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import URL

from tests.helpers.plans import (
    EXPLAIN,
    KEYS,
    LIMIT,
    compiled,
    generic_plan,
    loaded,
    nodes,
    offending,
    rolled_back,
    statements,
    worker_engine,
)
from workerpool import sql as queries
from workerpool.model.limits import ClaimLimits, KeyLimit

pytestmark = pytest.mark.slow  # big data: 100,000-row backlogs loaded and analyzed for EXPLAIN


def per_key_claim_plan(url: URL, planning: str) -> dict:
    """The explained plan of a per-key claim (limit 1 per key) on a worker's connection."""
    limits = ClaimLimits(keys=(KeyLimit("work", 1, None),))
    sql, params = compiled(
        lambda c: queries.claim(
            c,
            queue="q",
            worker="me",
            limit=LIMIT,
            task_versions={"work": 1},
            limits=limits,
        )
    )
    engine = worker_engine(url)
    try:
        with rolled_back(engine, lambda conn: None) as raw:
            return EXPLAIN[planning](raw, sql, params)
    finally:
        engine.dispose()


# -- the per-key probe, on statistics taken while nothing ran -------------------------------------

RUNNING = 300  # the jobs two busy workers hold; the statistics saw none of them


@pytest.fixture(scope="module")
def idle_analyzed_url(server_url: URL, template_db: str) -> Iterator[URL]:
    """A backlog analyzed before any of it ran, then ``RUNNING`` of it claimed. Its keys are
    as long as a tenant's id, so the key index is the larger of the two."""
    with loaded(
        server_url,
        template_db,
        [
            "ALTER TABLE workerpool_jobs SET (autovacuum_enabled = off)",
            f"""INSERT INTO workerpool_jobs (queue, task, payload, concurrency_key)
            SELECT 'q', 'work', '{{}}', 'tenant:' || md5((g % {KEYS})::text)
            FROM generate_series(1, 100000) g""",
            "VACUUM ANALYZE workerpool_jobs",
            "UPDATE workerpool_jobs SET state = 'processing', claimed_by = 'other',"
            f" claimed_at = now() WHERE id <= {RUNNING}",
        ],
    ) as url:
        yield url


@pytest.mark.parametrize("planning", list(EXPLAIN))
def test_per_key_probe_reads_only_its_key_when_statistics_saw_nothing_running(
    idle_analyzed_url, planning
):
    """Both ``ix_workerpool_jobs_running_key`` and ``_leased`` hold the running rows; the
    statistics rate them alike, and ``_leased`` would read every running row of the queue for
    each candidate of the claim (150 x 40 us)."""
    plan = per_key_claim_plan(idle_analyzed_url, planning)
    probes = {node["Index Name"] for node in nodes(plan) if node.get("Alias") == "held"}
    assert probes == {"ix_workerpool_jobs_running_key"}, probes
    assert plan["Actual Rows"] == LIMIT


# -- the claims' generic plans, on a table that is nearly all backlog ------------------------------

BACKLOG_ONLY = 120_000


@pytest.fixture(scope="module")
def backlog_url(server_url: URL, template_db: str) -> Iterator[URL]:
    """Nothing but a backlog, analyzed: a burst of enqueues on a young or pruned table."""
    with loaded(
        server_url,
        template_db,
        [
            f"""INSERT INTO workerpool_jobs (queue, task, payload, concurrency_key)
            SELECT 'q', 'work', jsonb_build_object('n', g), 'k' || (g % {KEYS})
            FROM generate_series(1, {BACKLOG_ONLY}) g""",
            "VACUUM ANALYZE workerpool_jobs",
        ],
    ) as url:
        yield url


@pytest.mark.parametrize("statement", ["claim", "claim alone", "claim limited", "claim per key"])
def test_a_claims_generic_plan_finds_its_rows_by_key_on_a_table_of_backlog(backlog_url, statement):
    """The worker keeps each statement's generic plan; priced with ``LIMIT $n`` unknown, a join
    of the update to its picked rows could hash a scan of the whole table (53 ms a claim)."""
    sql, params = statements(backlog_url, leases=False)[statement]
    engine = worker_engine(backlog_url)
    try:
        with rolled_back(engine, lambda conn: None) as raw:
            plan = generic_plan(raw, sql, params)
    finally:
        engine.dispose()
    assert offending(plan) == [], plan


# -- the per-key walk's counts, on a table analyzed while empty ----------------------------------


@pytest.fixture(scope="module")
def young_url(server_url: URL, template_db: str) -> Iterator[URL]:
    """Analyzed while empty (just migrated), then a backlog arrived and some of it ran."""
    with loaded(
        server_url,
        template_db,
        [
            "ALTER TABLE workerpool_jobs SET (autovacuum_enabled = off)",
            "VACUUM ANALYZE workerpool_jobs",
            f"""INSERT INTO workerpool_jobs (queue, task, payload, concurrency_key)
            SELECT 'q', 'work', '{{}}', 'k' || (g % {KEYS}) FROM generate_series(1, 50000) g""",
            "UPDATE workerpool_jobs SET state = 'processing', claimed_by = 'other',"
            f" claimed_at = now() WHERE id <= {RUNNING}",
        ],
    ) as url:
        yield url


@pytest.mark.parametrize("planning", list(EXPLAIN))
def test_the_per_key_walk_counts_its_candidates_once(young_url, planning):
    """The statistics say the walk finds one candidate; a join of the candidates to their
    per-key counts was then a nested loop that rebuilt the counts for every candidate."""
    plan = per_key_claim_plan(young_url, planning)
    counted = [
        node
        for node in nodes(plan)
        if node["Node Type"] == "Aggregate" and node.get("Strategy") == "Hashed"
    ]
    assert counted and all(node["Actual Loops"] == 1 for node in counted), counted
    assert plan["Actual Rows"] == LIMIT
