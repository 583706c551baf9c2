"""The dashboard for workflows that wait and run again, against real PostgreSQL: a parent
waiting in ``job.wait_for_job`` says on its page which job it awaits, and links it; a finished
job's page reruns it from a chosen step (admins only: no form, no route when read-only), and a
live job or an unknown step is a 4xx with one line and nothing changed."""

from __future__ import annotations

import json

from tests.helpers.db import job_state
from tests.helpers.web import client, post
from workerpool import testing

STEPS = {
    "fetch": {
        "kind": "step",
        "value": 1,
        "attempt": 1,
        "started_at": "2026-01-01T00:00:01+00:00",
        "finished_at": "2026-01-01T00:00:02+00:00",
    },
    "store": {
        "kind": "step",
        "value": 2,
        "attempt": 1,
        "started_at": "2026-01-01T00:00:03+00:00",
        "finished_at": "2026-01-01T00:00:04+00:00",
    },
}


def awaiting(app_pool, sql) -> tuple[int, int]:
    """A parent parked on its child as the await outcome leaves it (state and edge)."""
    child = app_pool.enqueue("ok", {}, delay=600)
    parent = app_pool.enqueue("ok", {})
    sql("UPDATE workerpool_jobs SET state = 'waiting' WHERE id = %s", parent)
    sql(
        "INSERT INTO workerpool_job_dependencies (job_id, parent_id, kind, if_failed)"
        " VALUES (%s, %s, 'await', 'run')",
        parent,
        child,
    )
    return parent, child


def test_a_waiting_parents_page_names_and_links_the_job_it_awaits(app_pool, http, sql):
    parent, child = awaiting(app_pool, sql)
    page = http.get(f"/jobs/{parent}").text
    assert f'<a href="/jobs/{child}" class="awaited">job {child}</a> (ok, pending)' in page
    assert f"it awaits job {child} (ok, pending)" in page


def test_once_the_child_ended_the_page_links_nothing(app_pool, http, sql):
    parent, child = awaiting(app_pool, sql)
    sql("UPDATE workerpool_jobs SET state = 'done', finished_at = now() WHERE id = %s", child)
    assert 'class="awaited"' not in http.get(f"/jobs/{parent}").text


def done_with_steps(app_pool, sql) -> int:
    job_id = app_pool.enqueue("ok", {})
    testing.drain(app_pool, "email")
    sql("UPDATE workerpool_jobs SET steps = %s::jsonb WHERE id = %s", json.dumps(STEPS), job_id)
    return job_id


def test_a_finished_jobs_page_offers_a_rerun_from_each_step(app_pool, http, sql):
    job_id = done_with_steps(app_pool, sql)
    page = http.get(f"/jobs/{job_id}").text
    assert 'id="rerun-form"' in page
    assert '<option value="fetch">from step fetch</option>' in page
    assert '<option value="store">from step store</option>' in page


def test_a_rerun_from_a_step_keeps_the_steps_before_it(app_pool, http, sql):
    job_id = done_with_steps(app_pool, sql)
    answer = post(http, f"/jobs/{job_id}/rerun", {"from_step": "store"}, page=f"/jobs/{job_id}")
    assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}"
    assert job_state(sql, job_id) == "pending"
    steps, replays = sql("SELECT steps, replays FROM workerpool_jobs WHERE id = %s", job_id)[0]
    assert list(steps) == ["fetch"]
    assert replays[-1]["by"] == "web@testclient" and replays[-1]["from_step"] == "store"
    page = http.get(f"/jobs/{job_id}").text
    assert f"job {job_id} runs again from step store" in page
    assert "rerun from step store at" in page and "after it was done" in page


def test_a_live_job_or_an_unknown_step_is_refused_with_one_line(app_pool, http, sql):
    job_id = done_with_steps(app_pool, sql)
    unknown = post(http, f"/jobs/{job_id}/rerun", {"from_step": "ship"}, page=f"/jobs/{job_id}")
    assert unknown.status_code == 400 and "recorded no step &#39;ship&#39;" in unknown.text
    assert job_state(sql, job_id) == "done"
    live = app_pool.enqueue("ok", {}, delay=600)
    refused = post(http, f"/jobs/{live}/rerun", page=f"/jobs/{job_id}")
    assert refused.status_code == 409 and f"job {live} is pending" in refused.text
    assert 'id="rerun-form"' not in http.get(f"/jobs/{live}").text


def test_read_only_has_no_rerun(app_pool, sql):
    job_id = done_with_steps(app_pool, sql)
    with client(app_pool, read_only=True) as http:
        assert 'id="rerun-form"' not in http.get(f"/jobs/{job_id}").text
        assert http.post(f"/jobs/{job_id}/rerun").status_code in (404, 405)
    assert job_state(sql, job_id) == "done"
