"""The dashboard's actions against real PostgreSQL: retry (single, filtered after a dry run),
purge, cancel, pause and resume, each through the same operations as the command line."""

from __future__ import annotations

import html
import re

import pytest

from tests.helpers.db import job_state
from tests.helpers.web import dead_jobs, post
from workerpool.testing import drain


def test_retry_one_dead_job_and_it_leaves_the_dead_list(app_pool, http, sql):
    job_id, other = dead_jobs(app_pool, 2)
    answer = post(http, f"/jobs/{job_id}/retry", page=f"/jobs/{job_id}")
    assert answer.status_code == 303 and answer.headers["location"] == "/dead"
    assert job_state(sql, job_id) == "pending" and job_state(sql, other) == "dead"
    listing = http.get("/dead")
    assert f'data-id="{job_id}"' not in listing.text and f'data-id="{other}"' in listing.text
    assert f"replayed job {job_id}: it is pending again" in listing.text
    assert "replayed job" not in http.get("/dead").text  # the notice is shown once
    replays = sql("SELECT replays FROM workerpool_jobs WHERE id = %s", job_id)[0][0]
    assert replays[0]["by"] == "web@testclient" and replays[0]["dead_reason"] == "exhausted"


def test_retrying_a_job_that_is_not_dead_changes_nothing(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, delay=600)
    answer = post(http, f"/jobs/{job_id}/retry")
    assert answer.status_code == 303
    assert f"job {job_id} is not dead" in http.get(f"/jobs/{job_id}").text
    assert job_state(sql, job_id) == "pending"


def test_filtered_retry_shows_a_dry_run_first(app_pool, http, sql):
    boom = dead_jobs(app_pool, 2)
    report = dead_jobs(app_pool, 1, task="monthly")[0]
    dry = post(http, "/dead/retry", {"queue": "email"}, page="/dead?queue=email")
    assert dry.status_code == 200
    assert "Dry run: replay 2 dead jobs" in dry.text and "<td>boom</td><td>2</td>" in dry.text
    assert all(job_state(sql, i) == "dead" for i in [*boom, report])
    confirm = post(http, "/dead/retry", {"queue": "email", "confirm": "1"})
    assert confirm.status_code == 303
    assert [job_state(sql, i) for i in boom] == ["pending", "pending"]
    assert job_state(sql, report) == "dead"


def test_a_retry_of_an_unknown_task_is_refused_whole(app_pool, http, sql):
    job_id = dead_jobs(app_pool, 1)[0]
    sql("UPDATE workerpool_jobs SET task = 'retired' WHERE id = %s", job_id)
    answer = post(http, "/dead/retry", {"confirm": "1"})
    assert answer.status_code == 409 and "task &#39;retired&#39; (1 jobs)" in answer.text
    assert job_state(sql, job_id) == "dead"


def test_purge_counts_first_then_deletes(app_pool, http, sql):
    old, new = dead_jobs(app_pool, 2)
    sql("UPDATE workerpool_jobs SET finished_at = now() - interval '40 days' WHERE id = %s", old)
    dry = post(http, "/dead/purge", {"older_than": "30d"}, page="/dead")
    assert dry.status_code == 200 and "Dry run: purge 1 dead jobs older than 30d" in dry.text
    assert len(sql("SELECT id FROM workerpool_jobs")) == 2
    assert post(http, "/dead/purge", {"older_than": "30d", "confirm": "1"}).status_code == 303
    assert [r[0] for r in sql("SELECT id FROM workerpool_jobs")] == [new]
    bad = post(http, "/dead/purge", {"older_than": "soon"})
    assert bad.status_code == 400 and "bad duration &#39;soon&#39;" in bad.text


def test_cancel_a_queued_job(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, delay=600)
    answer = post(http, f"/jobs/{job_id}/cancel", {"reason": "<b>not needed</b>"})
    assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}"
    page = http.get(f"/jobs/{job_id}")
    assert f"job {job_id}: cancelled" in page.text
    assert "&lt;b&gt;not needed&lt;/b&gt;" in page.text
    assert job_state(sql, job_id) == "cancelled"
    assert post(http, "/jobs/99999/cancel").status_code == 404


def test_pause_and_resume_a_queue(app_pool, http, sql):
    answer = post(http, "/queues/email/pause")
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    assert sql("SELECT paused, paused_by FROM workerpool_queues") == [(True, "web@testclient")]
    page = http.get("/")
    assert "queue email paused" in page.text and "badge paused" in page.text
    post(http, "/queues/email/resume")
    assert sql("SELECT paused FROM workerpool_queues") == [(False,)]
    unknown = post(http, "/queues/nosuch/pause")
    assert unknown.status_code == 404 and "unknown queue &#39;nosuch&#39;" in unknown.text


def _forms(page: str) -> dict[str, dict[str, str]]:
    """The dead-letter page's bulk forms as a browser would send them: each form's fields."""
    forms = {}
    for form_id, body in re.findall(
        r'<form method="post" action="[^"]*" id="(bulk-\w+)">(.*?)'
        r"</form>",
        page,
        re.S,
    ):
        fields = re.findall(r'<input(?: type="hidden")? name="(\w+)" value="([^"]*)"', body)
        forms[form_id] = {name: html.unescape(value) for name, value in fields}
    return forms


@pytest.mark.parametrize(
    "query",
    [
        {"queue": "reports"},
        {"task": "boom"},
        {"reason": "permanent"},
        {"key": "k-1"},
        {"tag": "vip"},
        {"since": "1d"},
        {"queue": "email", "tag": "vip", "since": "1d"},
    ],
)
def test_the_bulk_forms_act_on_exactly_what_the_dead_list_shows(app_pool, http, sql, query):
    ids = [
        app_pool.enqueue("boom", {"n": n}, key=f"k-{n}", tags=["vip"] if n % 2 else None)
        for n in range(4)
    ]
    ids += [app_pool.enqueue("monthly", {"n": n}) for n in range(2)]
    drain(app_pool, "email")
    drain(app_pool, "reports")
    sql(
        "UPDATE workerpool_jobs SET finished_at = now() - interval '3 days' WHERE id = ANY(%s)",
        ids[::3],
    )
    sql("UPDATE workerpool_jobs SET dead_reason = 'permanent' WHERE id = %s", ids[1])
    page = http.get("/dead", params=query).text
    shown = sorted(int(i) for i in re.findall(r'<tr class="job" data-id="(\d+)"', page))
    assert 0 < len(shown) < len(ids)
    forms = _forms(page)
    retry = http.post("/dead/retry", data=forms["bulk-retry"], follow_redirects=False)
    assert f"Dry run: replay {len(shown)} dead jobs" in retry.text, retry.text
    purge = http.post(
        "/dead/purge", data={**forms["bulk-purge"], "older_than": "0s"}, follow_redirects=False
    )
    assert f"Dry run: purge {len(shown)} dead jobs" in purge.text, purge.text
    confirmed = _confirm(purge.text)
    assert http.post("/dead/purge", data=confirmed, follow_redirects=False).status_code == 303
    left = {row[0] for row in sql("SELECT id FROM workerpool_jobs")}
    assert left == set(ids) - set(shown)


def _confirm(page: str) -> dict[str, str]:
    body = re.search(r'<form method="post" action="[^"]*" id="confirm">(.*?)</form>', page, re.S)[1]
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body)
    }


def test_the_job_actions_refuse_what_they_cannot_do_with_one_line_and_change_nothing(
    app_pool, http, sql
):
    due = app_pool.enqueue("ok", {})
    refused = post(http, f"/jobs/{due}/run-now")
    assert refused.status_code == 409 and f"job {due} is not scheduled for later" in refused.text
    assert post(http, "/jobs/99999/run-now").status_code == 404
    purge = post(http, f"/jobs/{due}/purge", {"confirm": "1"})
    assert purge.status_code == 409 and f"job {due} is not dead" in purge.text
    bad = post(http, f"/jobs/{due}/signal", {"name": "approved:7", "payload": "{nope"})
    assert bad.status_code == 400 and "the payload is not valid JSON" in bad.text
    assert post(http, f"/jobs/{due}/signal", {"name": ""}).status_code == 400
    assert post(http, f"/jobs/{due}/signal", {"name": "go"}).status_code == 303
    again = post(http, f"/jobs/{due}/signal", {"name": "go"})
    assert again.status_code == 409 and "the first one stands" in again.text
    assert job_state(sql, due) == "pending"
    assert [r[0] for r in sql("SELECT action FROM workerpool_audit")] == ["signal"]
    assert sql("SELECT count(*) FROM workerpool_signals") == [(1,)]


def test_cancelling_a_running_job_asks_first_and_a_queued_one_does_not(app_pool, http, sql):
    running = app_pool.enqueue("ok", {})
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'h:1:a',"
        " claimed_at = now() WHERE id = %s",
        running,
    )
    page = post(http, f"/jobs/{running}/cancel", {"reason": "wrong"})
    assert page.status_code == 200 and "That process runs no other job now." in page.text
    assert "10.0 s later is cancelled without it" in page.text  # the queue's cancel_grace
    assert sql("SELECT cancel_request FROM workerpool_jobs WHERE id = %s", running) == [(None,)]
    done = post(http, f"/jobs/{running}/cancel", {"reason": "wrong", "confirm": "1"})
    assert done.status_code == 303
    request = sql("SELECT cancel_request FROM workerpool_jobs WHERE id = %s", running)[0][0]
    assert request["message"] == "wrong"


def test_retry_a_cancelled_job_even_from_the_history(app_pool, http, sql):
    from workerpool.runtime.maintenance import Maintenance

    kept = app_pool.enqueue("ok", {}, delay=600)
    moved = app_pool.enqueue("ok", {}, delay=600)
    app_pool.cancel([kept, moved], reason="oops")
    app_pool.maintenance(history_delay=0)
    sql("UPDATE workerpool_jobs SET key = 'held', key_scope = NULL WHERE id = %s", kept)
    Maintenance(app_pool.registry, app_pool.engine, worker_id="m").keep_history()
    assert sql("SELECT count(*) FROM workerpool_jobs_history WHERE id = %s", moved) == [(1,)]
    assert "Retry this job" in http.get(f"/jobs/{moved}").text
    for job_id in (kept, moved):
        answer = post(http, f"/jobs/{job_id}/retry", {"cancelled": "1"})
        assert answer.status_code == 303, answer.text
        assert job_state(sql, job_id) == "pending"
    assert sql("SELECT count(*) FROM workerpool_jobs_history") == [(0,)]
    assert sql("SELECT coalesce(sum(count), 0) FROM workerpool_finished_minutes") == [(0,)]
    replays, attempts, request = sql(
        "SELECT replays, attempts, cancel_request FROM workerpool_jobs WHERE id = %s", moved
    )[0]
    assert (replays[0]["cancelled"], replays[0]["by"], attempts, request) == (
        True,
        "web@testclient",
        0,
        None,
    )
    assert "after it was cancelled" in http.get(f"/jobs/{moved}").text
    audit = sql("SELECT action, target FROM workerpool_audit WHERE action = 'retry'")
    assert audit == [("retry", f"job {kept}"), ("retry", f"job {moved}")]


def test_a_cancelled_job_that_cannot_be_retried_is_refused_whole(app_pool, http, sql):
    pending = app_pool.enqueue("ok", {})
    parent = app_pool.enqueue("ok", {}, delay=600)
    child = app_pool.enqueue("ok", {}, after=[parent])
    with app_pool.batch() as batch:
        member = batch.enqueue("ok", {}, delay=600)
    app_pool.cancel([child, member])
    cases = {
        pending: f"job {pending} is pending: only a cancelled job is retried here",
        child: "depends on other jobs",
        member: f"belongs to batch {batch.id}",
    }
    for job_id, line in cases.items():
        answer = post(http, f"/jobs/{job_id}/retry", {"cancelled": "1"})
        assert answer.status_code == 409 and line in answer.text, answer.text
    assert post(http, "/jobs/99999/retry", {"cancelled": "1"}).status_code == 404
    assert (job_state(sql, child), job_state(sql, member)) == ("cancelled", "cancelled")
    assert sql("SELECT count(*) FROM workerpool_audit WHERE action = 'retry'") == [(0,)]
