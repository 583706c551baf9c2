"""The dashboard's pages against real PostgreSQL: status codes, filters, keyset pagination, the
job page (payload, errors, lease, replays, why it is not running) and bad input."""

from __future__ import annotations

import re

import pytest

from tests.apps import web
from tests.helpers.web import client, dead_jobs, post
from workerpool.testing import drain


def listed_ids(page) -> list[int]:
    return [int(i) for i in re.findall(r'<tr class="job" data-id="(\d+)">', page.text)]


def test_overview_counts_each_queue_and_its_throughput(app_pool, http, sql):
    dead_jobs(app_pool, 2)
    app_pool.enqueue("ok", {}, delay=600)
    ok = app_pool.enqueue("ok", {})
    sql("ANALYZE workerpool_jobs")
    page = http.get("/")
    assert page.status_code == 200
    row = re.search(r'<tr id="queue-email">(.*?)</tr>', page.text, re.S)[1]
    assert '<td class="count-queued">2</td>' in row  # the delayed one and the due one, exact
    assert '<th title="pending or failed: for a worker">Queued</th>' in page.text
    assert re.search(r'class="count-dead"><a [^>]+>2</a>', row)  # a small table: exact
    assert "reports" in page.text and "badge running" in row
    assert "<svg" in page.text and "Dead per minute" in page.text
    drain(app_pool, "email")
    assert ok in [r[0] for r in sql("SELECT id FROM workerpool_jobs WHERE state = 'done'")]
    page = http.get("/")
    assert 'class="bar"><title>' in page.text
    assert '<td class="throughput">0.6</td>' in page.text  # 2 dead + 1 done in 5 minutes


def test_a_big_table_shows_estimates_labelled_as_such(app_pool, http, sql, monkeypatch):
    from workerpool.web import overview

    dead_jobs(app_pool, 3)
    sql("ANALYZE workerpool_jobs")
    monkeypatch.setattr(overview, "SMALL_TABLE", 2)
    page = http.get("/")
    row = re.search(r'<tr id="queue-email">(.*?)</tr>', page.text, re.S)[1]
    assert re.search(r'class="count-dead"><a [^>]+>≈ 3</a>', row)
    assert "planner's estimates" in page.text and "<th>Dead ≈</th>" in page.text


def test_the_hosts_table_counts_each_queues_processes(http, sql):
    for pid, queue in ((11, "email"), (12, "render"), (13, "render"), (14, "render")):
        sql(
            "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
            " VALUES (%s, 'box', %s, %s, '{}')",
            f"box:{pid}:x",
            pid,
            queue,
        )
    page = http.get("/")
    row = re.search(r'<table class="hosts">.*?<tr><td>box</td>(.*?)</tr>', page.text, re.S)[1]
    assert re.findall(r"<td>(.*?)</td>", row) == ["4", "email, render &times;3"]


def test_the_overview_refresh_is_the_fragment_only(http):
    page = http.get("/", headers={"HX-Request": "true"})
    assert page.status_code == 200
    assert page.text.startswith('<div id="overview"') and "<html" not in page.text


def test_jobs_list_filters_by_every_field(app_pool, http, sql):
    dead_ids = dead_jobs(app_pool, 2)
    keyed = app_pool.enqueue("ok", {}, key="invoice:7", delay=600)
    report = dead_jobs(app_pool, 1, task="monthly")[0]
    sql(
        "UPDATE workerpool_jobs SET created_at = now() - interval '3 hours' WHERE id = %s",
        dead_ids[0],
    )
    sql("UPDATE workerpool_jobs SET finished_at = now() - interval '2 days' WHERE id = %s", report)
    cases = {
        "/jobs": {*dead_ids, keyed, report},
        "/jobs?queue=reports": {report},
        "/jobs?task=boom": set(dead_ids),
        "/jobs?state=pending": {keyed},
        "/jobs?state=dead&reason=exhausted": {*dead_ids, report},
        "/jobs?reason=permanent": set(),
        "/jobs?key=invoice:7": {keyed},
        "/jobs?since=1h": {dead_ids[1], keyed, report},
        "/jobs?until=1h": {dead_ids[0]},
        "/jobs?queue=&task=&state=": {*dead_ids, keyed, report},  # empty fields: no filter
        "/dead": {*dead_ids, report},
        "/dead?queue=email": set(dead_ids),
        "/dead?since=1d": set(dead_ids),  # died within a day, whenever created
        "/jobs?state=dead&since=1d": set(dead_ids),
    }
    for path, expected in cases.items():
        page = http.get(path)
        assert page.status_code == 200, path
        assert set(listed_ids(page)) == expected, path
    dry_run = post(http, "/dead/retry", {"since": "1d"}, page="/dead?since=1d")
    assert "Dry run: replay 2 dead jobs" in dry_run.text  # what the list showed


def test_jobs_list_pages_by_keyset_never_offset(app_pool, http):
    ids = [app_pool.enqueue("ok", {"n": i}, delay=600) for i in range(7)]
    first = http.get("/jobs?limit=3")
    assert listed_ids(first) == ids[::-1][:3]
    older = re.search(r'href="([^"]+)" id="page-older"', first.text)[1].replace("&amp;", "&")
    assert f"before={ids[4]}" in older and "offset" not in older
    second = http.get(older)
    assert listed_ids(second) == ids[::-1][3:6]
    third = http.get(
        re.search(r'href="([^"]+)" id="page-older"', second.text)[1].replace("&amp;", "&")
    )
    assert listed_ids(third) == [ids[0]]
    assert 'id="page-older"' not in third.text and 'id="page-newest"' in third.text


def test_the_filter_form_swaps_only_the_table(app_pool, http):
    dead_jobs(app_pool, 1)
    page = http.get("/jobs?state=dead", headers={"HX-Request": "true", "HX-Target": "job-table"})
    assert page.text.startswith('<div id="job-table">') and len(listed_ids(page)) == 1


def test_job_page_shows_payload_errors_traceback_and_replays(app_pool, http):
    job_id = dead_jobs(app_pool, 1, note="hello")[0]
    assert post(http, f"/jobs/{job_id}/retry").status_code == 303
    drain(app_pool, "email")
    page = http.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "&#34;note&#34;: &#34;hello&#34;" in page.text
    assert page.text.count('class="traceback"') == 2  # one per failed attempt
    assert "Traceback (most recent call last)" in page.text
    assert "in boom" in page.text and "RuntimeError" in page.text
    assert 'class="replay"' in page.text and "web@testclient" in page.text
    assert "it is dead (exhausted)" in page.text


def test_job_page_names_the_lease_holder_and_the_checkpoint(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {})
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
        " VALUES ('web-host:42:abc', 'web-host', 42, 'email', '{\"ok\": 1}')"
    )
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1,"
        " claimed_by = 'web-host:42:abc', claimed_at = now() - interval '90 seconds',"
        " checkpoint = '{\"step\": 3}' WHERE id = %s",
        job_id,
    )
    page = http.get(f"/jobs/{job_id}")
    lease = re.search(r'<td id="lease">(.*?)</td>', page.text, re.S)[1]
    assert "web-host:42:abc" in lease and "pid 42" in lease
    assert re.search(r"last renewed 9[0-2]\.\ds ago", lease), lease  # now() moves on a busy machine
    assert "it is running: the lease is held by worker web-host:42:abc" in page.text
    assert "&#34;step&#34;: 3" in page.text


def cell(page, name: str) -> str:
    return re.search(rf'<td id="{name}">(.*?)</td>', page.text, re.S)[1]


def test_a_running_job_reads_since_its_attempt_started_not_its_last_renewal(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {})
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'h:1:a',"
        " run_at = now() - interval '8 minutes', started_at = now() - interval '6 minutes',"
        " claimed_at = now() - interval '0.4 seconds' WHERE id = %s",
        job_id,
    )
    page = http.get(f"/jobs/{job_id}")
    # The page reads now(): a loaded machine may take seconds between the UPDATE and the GET.
    assert re.search(r"\(6\.[01]m ago\), last renewed \d+\.\ds ago", cell(page, "lease"))
    assert cell(page, "waited") == "2.0m from due to its start"
    assert re.fullmatch(r"for 6\.[01]m so far", cell(page, "ran"))
    assert re.search(r"held by worker h:1:a since 6\.[01]m ago", why(http, job_id))


def test_every_claim_records_when_its_attempt_started_and_the_page_shows_waited_and_ran(
    app_pool, http, sql
):
    job_id = app_pool.enqueue("ok", {})
    waiting = http.get(f"/jobs/{job_id}")
    assert cell(waiting, "ran") == "-" and "so far (due since" in cell(waiting, "waited")
    drain(app_pool, "email")
    started, finished = sql(
        "SELECT started_at, finished_at FROM workerpool_jobs WHERE id = %s", job_id
    )[0]
    assert started is not None and started <= finished  # the plain claim stamped it
    sql(
        "UPDATE workerpool_jobs SET run_at = started_at - interval '90 seconds',"
        " finished_at = started_at + interval '5 seconds' WHERE id = %s",
        job_id,
    )
    page = http.get(f"/jobs/{job_id}")
    assert (cell(page, "waited"), cell(page, "ran")) == ("90.0s from due to its start", "5.0s")
    for name in ("created", "started", "finished"):  # relative, the exact time on hover
        assert re.fullmatch(
            r'<time class="when" datetime="[^"]+" title="\d{4}-\d\d-\d\d'
            r' \d\d:\d\d:\d\d\+00:00">(\d+ s ago|in \d+ s)</time>',
            cell(page, name),
        ), cell(page, name)


def why(http, job_id) -> str:
    return re.search(
        r'<section class="why" id="why">(.*?)</section>', http.get(f"/jobs/{job_id}").text, re.S
    )[1]


def test_why_a_due_job_is_not_running(app_pool, http, sql):
    later = app_pool.enqueue("ok", {}, delay=10800)
    assert "its run_at is in the future: due in 3.0h" in why(http, later)
    due = app_pool.enqueue("ok", {})
    app_pool.pause("email", by="ops")
    text = why(http, due)
    assert "queue email is paused since" in text and "by ops" in text
    app_pool.resume("email")
    # given the app, the page still says when nothing serves the queue (not "waits for a slot")
    assert "no live worker serves queue email" in why(http, due)
    sql(
        "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
        " VALUES ('h:1:a', 'h', 1, 'email', '{\"ok\": 1}')"
    )
    assert "Nothing holds it back" in why(http, due)
    sql("UPDATE workerpool_jobs SET payload_version = 3 WHERE id = %s", due)
    assert "payload version 3 is newer than any worker knows (up to 1)" in why(http, due)
    sql("UPDATE workerpool_jobs SET payload_version = 1, task = 'gone' WHERE id = %s", due)
    assert "the app has no task gone" in why(http, due)


def test_why_reads_live_workers_without_an_app(db_url, sql):
    from workerpool import WorkerPool

    bare = WorkerPool(db_url)
    app_pool = web.build(db_url)
    due = app_pool.enqueue("ok", {})
    with client(bare) as http:
        assert "no live worker serves queue email" in why(http, due)
        sql(
            "INSERT INTO workerpool_workers (id, host, pid, queue, tasks)"
            " VALUES ('h:1:a', 'h', 1, 'email', '{\"boom\": 1}')"
        )
        assert "no live worker of queue email knows task ok" in why(http, due)
        sql("UPDATE workerpool_workers SET tasks = '{\"ok\": 1}'")
        assert "Nothing holds it back" in why(http, due)
    bare.dispose()
    app_pool.dispose()


@pytest.mark.parametrize(
    ("path", "status", "line"),
    [
        ("/jobs?state=bogus", 400, "state must be one of pending"),
        ("/jobs?reason=tired", 400, "reason must be one of exhausted"),
        ("/jobs?queue=no%20spaces", 400, "queue name &#39;no spaces&#39; is invalid"),
        ("/jobs?limit=0", 400, "limit must be a positive whole number"),
        ("/jobs?limit=100000", 400, "limit must be at most 500"),
        ("/jobs?before=-3", 400, "before must be a positive whole number"),
        ("/jobs?since=yesterday", 400, "since must be a duration back from now"),
        ("/jobs?until=2024-01-01T00:00:00", 400, "until must be a duration back from now"),
        ("/jobs/abc", 400, "a job id is a positive whole number"),
        ("/jobs/99999999", 404, "no job has id 99999999"),
        ("/nowhere", 404, "Not Found"),
    ],
)
def test_bad_input_is_one_readable_line(http, path, status, line):
    page = http.get(path)
    assert page.status_code == status
    assert line in page.text


def test_dead_letters_page_by_keyset_most_recent_death_first(app_pool, http, sql):
    first, second, third = dead_jobs(app_pool, 3)
    for job_id, minutes in ((first, 1), (second, 30), (third, 10)):
        sql(
            "UPDATE workerpool_jobs SET finished_at = now() - make_interval(mins => %s)"
            " WHERE id = %s",
            minutes,
            job_id,
        )
    seen, path = [], "/dead?limit=1"
    while path:
        page = http.get(path)
        seen += listed_ids(page)
        older = re.search(r'href="([^"]+)" id="page-older"', page.text)
        path = older[1].replace("&amp;", "&") if older else None
    assert seen == [first, third, second]
