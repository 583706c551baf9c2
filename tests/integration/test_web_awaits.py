"""The dashboard for jobs that wait on others, against real PostgreSQL: a parent waiting in
``job.wait_for_job`` says on its page which job it awaits, and links it."""

from __future__ import annotations


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
