"""A typed job as an operator sees it: the dashboard's job page and `workerpool job show`'s
story name its arguments (given, defaulted, missing, unexpected) beside the raw payload, and
a list filtered by a typed task shows its signature."""

from __future__ import annotations

import pytest

from tests.apps import typed
from tests.helpers.web import client
from workerpool.ops import job_story

pytest.importorskip("starlette")


@pytest.fixture
def app(db_url):
    pool = typed.build(db_url)
    yield pool
    pool.dispose()


def test_the_job_page_shows_the_signature_and_each_argument(app):
    job_id = app.enqueue("send_welcome", {"welcome": {"email": "ada@example.com", "user_id": 1}})
    page = client(app).get(f"/jobs/{job_id}").text
    assert (
        '<code id="signature">send_welcome(welcome: Welcome, template: str = &#39;welcome&#39;)'
        "</code>" in page
    )
    assert "<th>welcome</th>" in page and "&#34;ada@example.com&#34;" in page
    assert '<th>template</th><td><pre class="payload">&#34;welcome&#34;</pre>' in page
    assert "(default)" in page and 'id="payload"' in page
    legacy = app.enqueue("legacy", {"any": 1})
    assert 'id="arguments"' not in client(app).get(f"/jobs/{legacy}").text
    listed = client(app).get("/jobs?task=send_welcome").text
    assert '<code id="task-signature">send_welcome(welcome: Welcome, template: str' in listed
    assert 'id="task-signature"' not in client(app).get("/jobs?task=legacy").text


def test_the_story_marks_a_stale_payload_s_missing_and_unexpected_arguments(app, db_url):
    old = typed.build_v1(db_url)
    try:
        job_id = old.enqueue("send_welcome", {"email": "ada@example.com", "user_id": 1})
    finally:
        old.dispose()
    with app.engine.connect() as conn:
        data = job_story.story(conn, job_id, app.registry)
        bare = job_story.story(conn, job_id)
    assert [(a["name"], a["source"]) for a in data["arguments"]["arguments"]] == [
        ("welcome", "missing"),
        ("template", "default"),
        ("email", "unexpected"),
        ("user_id", "unexpected"),
    ]
    text = job_story.render(data)
    assert "  welcome = -  (missing)\n" in text
    assert '  email = "ada@example.com"  (unexpected)' in text
    assert bare["arguments"] is None and "PAYLOAD {" in job_story.render(bare)
