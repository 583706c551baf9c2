"""The dashboard's cron page adds and removes schedules at run time, against real PostgreSQL:
the add form calls ``pool.cron_add`` (audited with the dashboard's user), an added schedule has
a Remove button a declared one lacks, bad input is a 4xx with one line and nothing written, and
a read-only dashboard has neither form nor route."""

from __future__ import annotations

import pytest

from tests.apps.cron_runtime import build as build_cron_app
from tests.helpers.web import client, post


@pytest.fixture
def cron_app(db_url):
    pool = build_cron_app(db_url)
    yield pool
    pool.dispose()


def added(sql) -> list[tuple]:
    return sql("SELECT name, expression, task, payload FROM workerpool_cron WHERE task IS NOT NULL")


def test_a_schedule_added_on_the_page_is_listed_and_removed(cron_app, sql):
    task = sorted(cron_app.tasks)[0]
    with client(cron_app) as http:
        form = {"name": "digest", "expression": "*/5 * * * *", "task": task, "payload": '{"n": 1}'}
        answer = post(http, "/cron-add", form, page="/cron")
        assert answer.status_code == 303, answer.text
        assert added(sql) == [("digest", "*/5 * * * *", task, {"n": 1})]
        page = http.get("/cron").text
        assert f"added by web@testclient: enqueues {task}" in page
        assert 'action="/cron/digest/remove"' in page
        assert 'action="/cron/beat/remove"' not in page  # declared in code: no Remove
        assert post(http, "/cron/digest/remove", page="/cron").status_code == 303
    assert added(sql) == []
    actions = sql("SELECT actor, action FROM workerpool_audit ORDER BY id")
    assert actions == [("web@testclient", "cron_add"), ("web@testclient", "cron_remove")]


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"name": "beat", "expression": "* * * * *"}, 409, "declared in code"),
        ({"name": "x", "expression": "61 * * * *"}, 400, "bad expression"),
        ({"name": "x", "expression": "* * * * *", "timezone": "Mars/X"}, 400, "unknown timezone"),
        ({"name": "x", "expression": "* * * * *", "payload": "{nope"}, 400, "not valid JSON"),
        ({"name": "x", "expression": "* * * * *", "task": "nope"}, 400, "nope"),
        ({"name": "", "expression": "* * * * *"}, 400, "needs a name"),
    ],
)
def test_bad_input_is_refused_with_one_line_and_nothing_written(
    cron_app, sql, form, status, message
):
    task = sorted(cron_app.tasks)[0]
    with client(cron_app) as http:
        answer = post(http, "/cron-add", {"task": task, **form}, page="/cron")
    assert answer.status_code == status and message in answer.text
    assert added(sql) == [] and sql("SELECT count(*) FROM workerpool_audit") == [(0,)]


def test_a_declared_schedule_cannot_be_removed(cron_app, sql):
    with client(cron_app) as http:
        answer = post(http, "/cron/beat/remove", page="/cron")
    assert answer.status_code == 409 and "declared in code" in answer.text


def test_read_only_has_no_add_form_and_no_route(cron_app):
    with client(cron_app, read_only=True) as http:
        assert 'id="cron-add-form"' not in http.get("/cron").text
        assert http.post("/cron-add").status_code in (404, 405)
