"""`workerpool status` names the limit that holds waiting jobs, and a job's own "why" line."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli
from workerpool import WorkerPool
from workerpool import sql as queries
from workerpool.model.limits import claim_limits
from workerpool.ops import status, why


def limited(pool: WorkerPool) -> WorkerPool:
    pool.queue("capped", global_concurrency=1)
    pool.queue("keyed")
    pool.task(lambda job: None, queue="capped", name="work")
    pool.task(
        lambda job: None,
        queue="keyed",
        name="sync",
        concurrency_limit=1,
        concurrency_key=lambda payload: f"account:{payload['account']}",
    )
    return pool


def publish_and_claim(pool: WorkerPool, queue: str, limit: int) -> list:
    limits = claim_limits(pool.registry.queue_spec(queue), pool.tasks)
    with pool.engine.begin() as conn:
        queries.publish_limits(conn, queue, limits.as_json())
        return queries.claim(
            conn,
            queue=queue,
            worker="w",
            limit=limit,
            task_versions=pool.registry.task_versions(queue),
            limits=limits,
        )


def test_status_names_the_limits_and_what_they_hold(pool):
    app = limited(pool)
    app.enqueue_many([("work", {"n": n}) for n in range(3)])
    app.enqueue_many([("sync", {"account": n % 2, "n": n}) for n in range(5)])
    publish_and_claim(app, "capped", 5)
    publish_and_claim(app, "keyed", 5)

    data = status.collect(app.engine)
    capped, keyed = data["queues"]["capped"]["limits"], data["queues"]["keyed"]["limits"]
    assert capped["global_concurrency"] == {"limit": 1, "running": 1, "held": 2}
    assert keyed["tasks"]["sync"] == {
        "concurrency_limit": 1,
        "key_rate_limit": None,
        "held_by_concurrency_limit": 3,
        "held_by_key_rate_limit": 0,
    }
    text = status.render(data)
    assert "LIMITS" in text and "global_concurrency" in text and "concurrency_limit (sync" in text


def why_line(app, job_id: int) -> str:
    """What `workerpool status --job` prints: the one answer the dashboard gives too."""
    with app.engine.connect() as conn:
        return why.line(why.explain(conn, job_id))


def test_a_jobs_why_line_names_the_limit_that_holds_it(pool):
    app = limited(pool)
    first, second = app.enqueue("work", {"n": 1}), app.enqueue("work", {"n": 2})
    held = app.enqueue("sync", {"account": 7, "n": 1})
    waiting = app.enqueue("sync", {"account": 7, "n": 2})
    free = app.enqueue("sync", {"account": 8, "n": 1})
    publish_and_claim(app, "capped", 5)
    [claimed] = [row.id for row in publish_and_claim(app, "keyed", 1)]
    assert claimed == held
    assert "held by global_concurrency of queue capped (1 of 1 running)" in why_line(app, second)
    assert "it is running" in why_line(app, first)  # every reason, not only limits
    assert "held by concurrency_limit of key 'account:7' (1 of 1 running)" in why_line(app, waiting)
    assert why_line(app, free) == f"job {free} (sync): no live worker serves queue keyed"


@pytest.mark.slow  # the CLI as a subprocess
def test_status_job_on_the_command_line(pool, db_url, tmp_path):
    app = limited(pool)
    app.enqueue("work", {"n": 1})
    second = app.enqueue("work", {"n": 2})
    publish_and_claim(app, "capped", 5)
    result = run_cli("status", "--job", str(second), "--json", url=db_url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "global_concurrency" in json.loads(result.stdout)["why"]
    missing = run_cli("status", "--job", "999999", url=db_url, cwd=tmp_path)
    assert missing.returncode != 0 and "no job has id 999999" in missing.stderr


def test_the_dashboards_job_page_names_the_limit_that_holds_it(pool):
    from tests.helpers.web import client

    app = limited(pool)
    app.enqueue("work", {"n": 1})
    second = app.enqueue("work", {"n": 2})
    publish_and_claim(app, "capped", 5)
    with client(app) as http:
        page = http.get(f"/jobs/{second}")
    assert page.status_code == 200
    assert "held by the global_concurrency of queue capped (1 of 1 running)" in page.text
