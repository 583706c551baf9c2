"""The dashboard's batch pages against real PostgreSQL: the list of open and finished batches
with progress bars, one batch (its callbacks, members by state, keyset pages of members), a
job's batch and result, and bad input."""

from __future__ import annotations

import re

from workerpool.testing import drain
from workerpool.web import batch_pages


def batch_of(app_pool, members: int, *, dead: int = 0, key: str | None = None) -> int:
    with app_pool.batch(on_complete="ok", key=key) as batch:
        batch.enqueue_many(
            [("ok", {"n": n}) for n in range(members)] + [("boom", {"n": n}) for n in range(dead)]
        )
    return batch.id  # type: ignore[return-value]


def test_the_list_shows_open_batches_with_a_progress_bar_and_finished_ones(app_pool, http):
    finished = batch_of(app_pool, 2, dead=1, key="month:11")
    drain(app_pool, "email")  # the callback (ok, on email) runs too
    opened = batch_of(app_pool, 3)
    page = http.get("/batches")
    assert page.status_code == 200 and 'id="nav-batches"' in page.text
    open_rows = re.search(
        r'<table class="batches" id="open-batches">(.*?)</table>', page.text, re.S
    )[1]
    assert f'href="/batches/{opened}"' in open_rows and f'/batches/{finished}"' not in open_rows
    assert '<svg class="progress"' in open_rows and "0 of 3 ended" in open_rows
    done_rows = re.search(r'id="finished-batches">(.*?)</table>', page.text, re.S)[1]
    assert f'href="/batches/{finished}"' in done_rows and "month:11" in done_rows
    assert ">failure</span>" in done_rows and "<td>outcome</td>" in done_rows


def test_a_batch_page_shows_progress_callbacks_and_members_by_keyset_pages(
    app_pool, http, monkeypatch
):
    monkeypatch.setattr(batch_pages, "MEMBERS_PAGE", 2)
    batch_id = batch_of(app_pool, 3, dead=1)
    page = http.get(f"/batches/{batch_id}")
    assert page.status_code == 200
    assert re.search(r"Opened <time class=\"when\"[^>]*>\d+ s ago</time>", page.text)
    assert "enqueued once the last member ends" in page.text
    drain(app_pool, "email")
    page = http.get(f"/batches/{batch_id}")
    assert ">failure</span> (fired by outcome)" in page.text
    assert '<rect x="0.00" y="0" width="450.00" height="12" class="done">' in page.text
    callback = re.search(
        r'<li>job <a href="/jobs/(\d+)">\d+</a> <span class="state done">', page.text
    )
    assert callback, page.text
    members = re.findall(r'<tr><td><a href="/jobs/(\d+)">', page.text)
    assert len(members) == 2 and 'id="next-members"' in page.text
    after = re.search(r"state=done&amp;after=(\d+)", page.text)[1]
    rest = http.get(f"/batches/{batch_id}?state=done&after={after}")
    assert re.findall(r'<tr><td><a href="/jobs/(\d+)">', rest.text) != members
    assert 'id="next-members"' not in rest.text
    dead = http.get(f"/batches/{batch_id}?state=dead")
    assert len(re.findall(r'<span class="state dead">dead</span></td>', dead.text)) == 1


def test_a_job_page_links_its_batch_and_shows_its_result(app_pool, http):
    batch_id = batch_of(app_pool, 1)
    drain(app_pool, "email")
    member = app_pool.batch_status(batch_id)
    job_id = next(m.job_id for m in app_pool.batch_results(batch_id))
    page = http.get(f"/jobs/{job_id}")
    assert f'<td id="batch"><a href="/batches/{batch_id}">{batch_id}</a></td>' in page.text
    assert "none (the handler returned nothing)" in page.text and member.finished


def test_bad_or_unknown_batches_are_refused_in_one_line(http):
    assert http.get("/batches/987").status_code == 404
    assert "no batch 987" in http.get("/batches/987").text
    assert http.get("/batches/x").status_code == 400
    assert http.get("/batches/1?state=sleeping").status_code in (400, 404)


def test_every_live_member_of_a_batch_is_cancelled_after_a_dry_run(app_pool, http, sql):
    import html

    with app_pool.batch() as batch:
        members = [batch.enqueue("ok", {"n": n}) for n in range(3)]
    lone = app_pool.enqueue("ok", {})
    page = http.get(f"/batches/{batch.id}").text
    body = re.search(
        r'<form method="post" action="/jobs/bulk-all" id="act-on-all"[^>]*>(.*?)'
        r"</form>",
        page,
        re.S,
    )[1]
    form = {
        n: html.unescape(v)
        for n, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body)
    }
    assert form["q"] == f"batch:{batch.id}"
    dry = http.post("/jobs/bulk-all", data={**form, "action": "cancel"})
    assert "Dry run: cancel 3 jobs matching the filter" in dry.text
    confirm = {
        n: html.unescape(v)
        for n, v in re.findall(
            r'<input type="hidden" name="(\w+)" value="([^"]*)"',
            re.search(r'id="confirm">(.*?)</form>', dry.text, re.S)[1],
        )
    }
    http.post("/jobs/bulk-all", data=confirm)
    states = dict(sql("SELECT id, state FROM workerpool_jobs"))
    assert [states[i] for i in members] == ["cancelled"] * 3 and states[lone] == "pending"
    listed = http.get("/jobs", params={"q": f"batch:{batch.id}"}).text
    assert sorted(int(i) for i in re.findall(r'data-id="(\d+)"', listed)) == members


def test_the_batches_and_audit_pages_read_times_relative_with_the_exact_one_on_hover(
    app_pool, http
):
    with app_pool.batch() as batch:
        batch.enqueue("ok", {})
    app_pool.pause("email", by="ops")
    when = (
        r'<time class="when" datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d'
        r'\+00:00">\d+ s ago</time>'
    )
    assert re.search(rf'<tr id="batch-{batch.id}">.*?{when}', http.get("/batches").text, re.S)
    assert re.search(when, http.get("/audit").text)
