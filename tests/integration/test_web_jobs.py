"""The jobs list as operators use it, against real PostgreSQL: state tabs with counts,
relative times with the exact time on hover, the tag filter (jobs and dead letters), a job's
tags, progress and logs on its page, bulk cancel and replay (dry run first, all or nothing),
and the header's search; every bad input is a 4xx with one line and nothing changed."""

from __future__ import annotations

import re

import pytest

from tests.helpers.db import job_state
from tests.helpers.web import csrf, dead_jobs
from workerpool.ops.bulk import MAX_BULK


def bulk(http, action: str, ids, **form):
    data = {
        "csrf_token": csrf(http, "/jobs"),
        "action": action,
        "id": [str(i) for i in ids],
        **form,
    }
    return http.post("/jobs/bulk", data=data, follow_redirects=False)


def states(sql) -> list[tuple]:
    return sql("SELECT id, state FROM workerpool_jobs ORDER BY id")


def test_state_tabs_show_their_counts_and_filter(app_pool, http):
    dead_jobs(app_pool, 2)
    for _ in range(3):
        app_pool.enqueue("ok", {}, delay=600)
    page = http.get("/jobs").text
    counts = dict(re.findall(r'id="tab-(\w+)"[^>]*>\w+ <span class="count">(\d+)</span>', page))
    assert counts["all"] == "5" and counts["pending"] == "3" and counts["dead"] == "2"
    assert counts["done"] == "0"
    dead = http.get("/jobs?state=dead").text
    assert 'id="tab-dead" class="tab active"' in dead and dead.count('class="job"') == 2


def test_times_are_relative_with_the_exact_time_on_hover(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, delay=600)
    sql("UPDATE workerpool_jobs SET created_at = now() - interval '125 seconds'")
    created = sql("SELECT created_at FROM workerpool_jobs")[0][0]
    row = http.get("/jobs").text
    exact = created.isoformat(sep=" ", timespec="seconds")
    assert f'title="{exact}">2 min ago</time>' in row
    assert ">in 10 min</time>" in row  # run_at, ten minutes ahead
    assert f'data-id="{job_id}"' in row


def test_the_tag_filter_on_the_jobs_list_and_the_dead_letters(app_pool, http):
    tagged = app_pool.enqueue("ok", {}, delay=600, tags=["tenant:7", "import"])
    app_pool.enqueue("ok", {}, delay=600, tags=["tenant:8"])
    dead_tagged = app_pool.enqueue("boom", {}, tags=["tenant:7"])
    dead_jobs(app_pool, 1)
    page = http.get("/jobs?tag=tenant:7").text
    assert re.findall(r'data-id="(\d+)"', page) == [str(dead_tagged), str(tagged)]
    assert 'class="tag" href="/jobs?tag=import">import</a>' in page
    dead = http.get("/dead?tag=tenant%3A7").text
    assert re.findall(r'data-id="(\d+)"', dead) == [str(dead_tagged)]
    assert '<input type="hidden" name="tag" value="tenant:7">' in dead  # bulk replay keeps it
    bad = http.get("/jobs?tag=" + "x" * 101)
    assert bad.status_code == 400 and "a tag has at most 100" in bad.text


def test_the_job_page_shows_tags_progress_and_logs(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, tags=["tenant:7"])
    sql('UPDATE workerpool_jobs SET progress = \'{"value": 0.4, "attempt": 1, "at": "x"}\'')
    sql(
        "INSERT INTO workerpool_job_logs (job_id, attempt, records, dropped) VALUES"
        ' (%s, 1, \'[{"at": "t", "level": "INFO", "logger": "app",'
        ' "message": "<b>copied</b> 4"}]\', 2)',
        job_id,
    )
    page = http.get(f"/jobs/{job_id}").text
    assert '<a class="tag" href="/jobs?tag=tenant%3A7">tenant:7</a>' in page
    assert '<progress max="1" value="0.4"></progress> 40% (attempt 1' in page
    assert "Attempt 1" in page and "INFO app: &lt;b&gt;copied&lt;/b&gt; 4" in page
    assert "truncated: 2 more record(s) not kept" in page


def test_bulk_cancel_is_a_dry_run_first_then_applied(app_pool, http, sql):
    ids = [app_pool.enqueue("ok", {}, delay=600) for _ in range(3)]
    dry = bulk(http, "cancel", ids[:2], reason="not needed")
    assert dry.status_code == 200 and "Dry run: cancel 2 jobs" in dry.text
    assert [job_state(sql, i) for i in ids] == ["pending"] * 3
    ticked = re.findall(r'name="id" value="(\d+)"', dry.text)
    assert ticked == [str(i) for i in ids[:2]]
    done = bulk(http, "cancel", ids[:2], reason="not needed", confirm="1")
    assert done.status_code == 303 and done.headers["location"] == "/jobs"
    assert [job_state(sql, i) for i in ids] == ["cancelled", "cancelled", "pending"]
    assert "2 jobs cancelled" in http.get("/jobs").text


def test_bulk_replay_of_dead_jobs(app_pool, http, sql):
    ids = dead_jobs(app_pool, 2)
    assert "Dry run: replay 2 jobs" in bulk(http, "retry", ids).text
    assert bulk(http, "retry", ids, confirm="1").status_code == 303
    assert [job_state(sql, i) for i in ids] == ["pending", "pending"]


def test_bad_bulk_input_is_refused_with_one_line_and_nothing_changes(app_pool, http, sql):
    live = app_pool.enqueue("ok", {}, delay=600)
    dead = dead_jobs(app_pool, 1)[0]
    before = states(sql)
    cases = [
        (bulk(http, "cancel", [live, 99999], confirm="1"), 404, "unknown job id(s): 99999"),
        (bulk(http, "cancel", [live, dead], confirm="1"), 409, f"job(s) {dead} (dead)"),
        (bulk(http, "retry", [dead, live], confirm="1"), 409, f"job(s) {live} (pending)"),
        (bulk(http, "cancel", range(1, MAX_BULK + 2), confirm="1"), 400, f"at most {MAX_BULK}"),
        (bulk(http, "cancel", [], confirm="1"), 400, "no job selected"),
        (bulk(http, "cancel", ["x1"], confirm="1"), 400, "a job id is a positive whole number"),
        (bulk(http, "purge", [live], confirm="1"), 400, "action must be one of cancel, retry"),
    ]
    for answer, status, line in cases:
        assert answer.status_code == status, answer.text
        assert (
            re.search(r'<p class="error" id="error">([^<]*)</p>', answer.text)[1].count(
                line.replace("'", "&#39;")
            )
            == 1
        )
    assert states(sql) == before
    no_token = http.post("/jobs/bulk", data={"action": "cancel", "id": [str(live)], "confirm": "1"})
    assert no_token.status_code == 403 and states(sql) == before


@pytest.mark.parametrize(
    ("query", "where"),
    [("42", "/jobs/42"), (" 42 ", "/jobs/42"), ("invoice-7", "/jobs?key=invoice-7")],
)
def test_the_search_box_opens_a_job_or_lists_a_key(http, query, where):
    answer = http.get("/search", params={"q": query}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == where


@pytest.mark.parametrize("query", ["", "   ", "k" * 1001])
def test_a_bad_search_is_refused(http, query):
    answer = http.get("/search", params={"q": query})
    assert answer.status_code == 400 and 'id="error"' in answer.text


def test_a_read_only_dashboard_has_no_bulk_actions(app_pool, sql):
    from tests.helpers.web import client

    job_id = app_pool.enqueue("ok", {}, delay=600)
    with client(app_pool, read_only=True) as http:
        assert 'id="bulk"' not in http.get("/jobs").text
        assert http.post(
            "/jobs/bulk", data={"action": "cancel", "id": [str(job_id)]}
        ).status_code in (404, 405)
    assert job_state(sql, job_id) == "pending"


HTMX = {"HX-Request": "true", "HX-Target": "job-table"}


def tab_counts(text: str) -> dict[str, str]:
    return dict(re.findall(r'id="tab-(\w+)"[^>]*>\w+ <span class="count">([\d,+~]+)</span>', text))


def test_filtering_swaps_the_tabs_too_and_they_keep_the_filter(app_pool, http):
    """The filter form sends every field, empty or not; its answer carries the tabs (out of
    band), counted and linked under the filter, and the address to push has only what filters."""
    dead_jobs(app_pool, 2)
    dead_jobs(app_pool, 1, task="monthly")
    app_pool.enqueue("monthly", {}, delay=600)
    app_pool.enqueue("ok", {}, delay=600, tags=["vip"])
    empty = {name: "" for name in ("task", "state", "reason", "key", "tag", "since", "until")}
    answer = http.get("/jobs", params={"queue": "reports", **empty}, headers=HTMX)
    assert answer.status_code == 200
    assert answer.headers["HX-Push-Url"] == "/jobs?queue=reports"
    assert '<nav class="tabs" id="state-tabs" hx-swap-oob="true">' in answer.text
    counts = tab_counts(answer.text)
    assert (counts["all"], counts["pending"], counts["dead"]) == ("2", "1", "1")
    assert 'href="/jobs?queue=reports&amp;state=dead" id="tab-dead"' in answer.text
    # a filter beyond the queue: the tabs count exactly its matches
    tagged = http.get("/jobs", params={**empty, "queue": "", "tag": "vip"}, headers=HTMX)
    assert tagged.headers["HX-Push-Url"] == "/jobs?tag=vip"
    counts = tab_counts(tagged.text)
    assert (counts["all"], counts["pending"], counts["dead"]) == ("1", "1", "0")
    assert 'href="/jobs?tag=vip&amp;state=pending" id="tab-pending"' in tagged.text
    whole = http.get("/jobs?task=boom").text  # a full page: the same tabs
    assert (tab_counts(whole)["all"], tab_counts(whole)["dead"]) == ("2", "2")


def listed(http, path: str, **params) -> list[int]:
    page = http.get(path, params=params)
    assert page.status_code == 200, page.text
    return [int(i) for i in re.findall(r'<tr class="job" data-id="(\d+)"', page.text)]


def test_the_query_box_filters_by_payload_and_qualifiers_and_the_tabs_follow(app_pool, http):
    ann = app_pool.enqueue("ok", {"user": {"id": 42, "name": "ann"}}, delay=600, tags=["vip"])
    bob = app_pool.enqueue("ok", {"user": {"id": 7}}, delay=600, tags=["vip"])
    other = app_pool.enqueue("ok", {"user": {"id": 42}}, delay=600)
    dead = dead_jobs(app_pool, 1, user={"id": 42})[0]
    assert listed(http, "/jobs", q="args.user.id:42") == [dead, other, ann]
    assert listed(http, "/jobs", q="args.user.id:42 tag:vip") == [ann]
    assert listed(http, "/jobs", q="args.user.id:42 state:dead") == [dead]
    assert listed(http, "/jobs", q="args.user.id:42", state="pending") == [other, ann]
    assert listed(http, "/jobs", q="tag:vip args.user.name:ann task:ok queue:email") == [ann]
    page = http.get("/jobs", params={"q": "args.user.id:42"}).text
    counts = tab_counts(page)
    assert (counts["all"], counts["pending"], counts["dead"]) == ("3", "2", "1")
    assert 'href="/jobs?q=args.user.id%3A42&amp;state=dead" id="tab-dead"' in page
    assert bob not in listed(http, "/jobs", q="args.user.id:42")
    bad = http.get("/jobs", params={"q": "colour:red"})
    assert bad.status_code == 400 and "unknown qualifier &#39;colour&#39;" in bad.text
    # the header's box takes a query too, and still an id or a key
    found = http.get("/search", params={"q": "args.user.id:7"}, follow_redirects=False)
    assert found.headers["location"] == "/jobs?q=args.user.id%3A7"
    key = http.get("/search", params={"q": "account:42"}, follow_redirects=False)
    assert key.headers["location"] == "/jobs?key=account%3A42"


def page_form(text: str, form_id: str) -> dict[str, str]:
    import html

    body = re.search(
        rf'<form method="post" action="[^"]*" id="{form_id}"[^>]*>(.*?)</form>', text, re.S
    )[1]
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body)
    }


def test_every_match_of_the_filter_after_a_dry_run_and_none_that_came_later(
    app_pool, http, sql, monkeypatch
):
    tagged = [app_pool.enqueue("ok", {"n": n}, delay=600, tags=["vip"]) for n in range(3)]
    other = app_pool.enqueue("ok", {}, delay=600)
    page = http.get("/jobs", params={"tag": "vip", "queue": ""}).text
    form = {**page_form(page, "bulk-all"), "action": "cancel", "note": "wrong"}
    assert {k: v for k, v in form.items() if k != "csrf_token"} == {
        "tag": "vip",
        "action": "cancel",
        "note": "wrong",
    }
    dry = http.post("/jobs/bulk-all", data=form)
    assert "Dry run: cancel 3 jobs matching the filter" in dry.text, dry.text
    assert [job_state(sql, i) for i in tagged] == ["pending"] * 3
    late = app_pool.enqueue("ok", {}, delay=600, tags=["vip"])  # after the dry run
    done = http.post("/jobs/bulk-all", data=page_form(dry.text, "confirm"), follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/jobs?tag=vip"
    assert [job_state(sql, i) for i in tagged] == ["cancelled"] * 3
    assert (job_state(sql, late), job_state(sql, other)) == ("pending", "pending")
    assert [row[0] for row in sql("SELECT action FROM workerpool_audit")] == ["cancel"]

    dead = dead_jobs(app_pool, 2, user={"id": 42}) + dead_jobs(app_pool, 1, user={"id": 7})
    page = http.get("/jobs", params={"q": "args.user.id:42"}).text
    dry = http.post("/jobs/bulk-all", data={**page_form(page, "bulk-all"), "action": "retry"})
    assert "Dry run: replay 2 jobs matching the filter" in dry.text
    http.post("/jobs/bulk-all", data=page_form(dry.text, "confirm"))
    assert [job_state(sql, i) for i in dead] == ["pending", "pending", "dead"]

    monkeypatch.setattr("workerpool.ops.bulk.MAX_MATCHES", 2)
    refused = http.post(
        "/jobs/bulk-all", data={"csrf_token": csrf(http, "/jobs"), "action": "cancel"}
    )
    assert (
        refused.status_code == 400 and "more than 2 jobs match: narrow the filter" in refused.text
    )
