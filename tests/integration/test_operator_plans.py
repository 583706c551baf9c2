"""The operator paths never scan the jobs table: every statement `workerpool status`,
`workerpool dead list` and the metrics depth sample send is EXPLAINed on a table whose
statistics describe a long history (200k finished rows, ANALYZEd), and none may plan a
sequential scan of workerpool_jobs: on a 10M-row history a scan takes seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from workerpool import sql as queries
from workerpool.ops import dead, status
from workerpool.ops.dead import DeadFilter

pytestmark = pytest.mark.slow  # big data: 200,000 history rows loaded for EXPLAIN

HISTORY = 200_000

SEED = f"""
INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at, finished_at)
SELECT CASE WHEN i % 10 = 0 THEN 'b' ELSE 'a' END, 't', 'done', 1, 'w', now(),
       now() - make_interval(secs => i)
FROM generate_series(1, {HISTORY}) AS i;
INSERT INTO workerpool_jobs (queue, task, state)
SELECT CASE WHEN i % 2 = 0 THEN 'b' ELSE 'a' END, 't', 'pending' FROM generate_series(1, 2000) AS i;
INSERT INTO workerpool_jobs (queue, task, state, attempts, crashes)
SELECT 'a', 't', 'failed', 1, i % 2 FROM generate_series(1, 50) AS i;
INSERT INTO workerpool_jobs (queue, task, state, attempts, claimed_by, claimed_at)
SELECT 'a', 't', 'processing', 1, 'h:1:x', now() FROM generate_series(1, 10);
INSERT INTO workerpool_jobs (queue, task, state, dead_reason, attempts, max_attempts, finished_at)
SELECT 'a', 't', 'dead', 'exhausted', 1, 1, now() - make_interval(mins => i)
FROM generate_series(1, 20) AS i;
INSERT INTO workerpool_workers (id, host, pid, queue, tasks)
VALUES ('h:1:x', 'h', 1, 'a', '{{"t": 1}}');
"""


@pytest.fixture
def history(pool, sql):
    sql(SEED)
    sql("VACUUM ANALYZE workerpool_jobs")
    return pool


@contextmanager
def captured(engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement (and its parameters) the engine sends inside the block."""
    sent: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def seq_scans(plan: Any) -> list[str]:
    """The relations a plan reads with a sequential scan."""
    found = []
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan":
            found.append(plan.get("Relation Name"))
        for value in plan.values():
            found += seq_scans(value)
    elif isinstance(plan, list):
        for item in plan:
            found += seq_scans(item)
    return found


def assert_no_table_scan(dsn: str, sent: list[tuple[str, Any]]) -> None:
    on_jobs = [
        (s, p)
        for s, p in sent
        if "workerpool_jobs" in s and not s.lstrip().upper().startswith("EXPLAIN")
    ]
    assert on_jobs, "the path sent no statement on workerpool_jobs"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement, params in on_jobs:
            plan = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            assert "workerpool_jobs" not in seq_scans(plan), (
                f"sequential scan of workerpool_jobs in:\n{statement}\n{json.dumps(plan)[:2000]}"
            )


def run(engine, dsn: str, call: Callable[[], Any]) -> Any:
    with captured(engine) as sent:
        result = call()
    assert_no_table_scan(dsn, sent)
    return result


def test_status_plans_no_scan_and_labels_its_estimates(history, dsn):
    data = run(history.engine, dsn, lambda: status.collect(history.engine))
    a = data["queues"]["a"]
    assert a["counts"]["pending"] == 1000 and a["counts"]["failed"] == 50  # exact: below the cap
    assert a["counts"]["processing"] == 10 and a["counts"]["dead"] == 20
    assert a["dead_by_reason"]["exhausted"] == 20 and a["suspects"] == 25
    assert "done" in a["estimated"] and "pending" not in a["estimated"]
    assert 0.8 * 180_000 < a["counts"]["done"] < 1.2 * 180_000  # ANALYZE's sample, not a count
    assert "~" in status.render(data)


def test_status_with_the_app_plans_no_scan(history, dsn):
    run(history.engine, dsn, lambda: status.collect(history.engine, {"a": {"t": 1}, "b": {}}))


@pytest.mark.parametrize(
    "filters",
    [
        None,
        DeadFilter(queue="a"),
        DeadFilter(queue="a", task="t", reason="exhausted", since=timedelta(hours=1)),
    ],
)
def test_dead_list_plans_no_scan(history, dsn, filters):
    page = run(history.engine, dsn, lambda: dead.list_dead(history, filters, limit=5))
    assert len(page.jobs) == 5 and page.total == 20


def test_the_depth_sample_plans_no_scan(history, dsn):
    def sample():
        with history.engine.connect() as conn:
            return queries.queue_depths(conn, ["a", "b"])

    depths = run(history.engine, dsn, sample)
    assert depths["a"]["queued"] == 1050 and depths["a"]["processing"] == 10


@pytest.mark.parametrize("path", ["/", "/dead", "/jobs?state=dead&queue=a", "/jobs?state=pending"])
def test_the_dashboards_job_lists_plan_no_scan(history, dsn, path):
    from tests.helpers.web import client

    with client(history) as http:
        page = run(history.engine, dsn, lambda: http.get(path))
    assert page.status_code == 200
