"""The dashboard's /tasks page lists each task as its workers registered it (what SQL and HTTP
producers are checked against): queue and its bound, the arguments a typed task takes, the
defaults, when it was last registered; and names the app's tasks no worker registered yet."""

from __future__ import annotations

import re

import pytest

from tests.helpers.web import client
from workerpool import WorkerPool


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("mail", max_pending=50)
    pool.queue("reports")

    @pool.task(queue="mail", max_attempts=3, priority=2)
    def send(job, to, cc=None):  # a typed handler: its arguments are the payload
        return None

    @pool.task(queue="reports", version=2)
    def monthly(job):  # the payload as a dict
        return None

    return pool


def row(page: str, task: str) -> str:
    found = re.search(rf'<tr id="task-{task}">(.*?)</tr>', page, re.S)
    assert found, f"no row for {task} in {page[:2000]}"
    return re.sub(r"\s+", " ", found[1])


def cells(page: str, task: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in row(page, task).split("</td>")[:-1]]


def test_each_registered_task_is_listed_with_its_queue_arguments_and_defaults(app):
    app.register_tasks()
    with client(app) as http:
        answer = http.get("/tasks")
    assert answer.status_code == 200, answer.text
    page = answer.text
    assert cells(page, "send")[:6] == [
        "send",
        "mail at most 50 waiting",
        "(to, cc=…)",
        "3",
        "2",
        "1",
    ]
    assert cells(page, "monthly")[:6] == ["monthly", "reports", "any JSON object", "5", "0", "2"]
    assert '<time class="when"' in row(page, "send")  # when it was registered, exact on hover
    assert 'href="/jobs?task=send"' in row(page, "send")
    assert 'href="/jobs?queue=mail"' in row(page, "send")
    assert 'id="unregistered"' not in page and "not in this app" not in page


def test_the_apps_tasks_no_worker_registered_are_named_and_a_gone_one_is_marked(app, sql):
    with client(app) as http:
        page = http.get("/tasks").text
    assert "No task registered" in page
    assert re.search(r'id="unregistered".*<code>monthly</code>, <code>send</code>\.', page)
    # a row another application's workers wrote, whose handler takes any further argument
    sql(
        "INSERT INTO workerpool_tasks (task, queue, max_attempts, priority, payload_version,"
        """ payload_limit, params) VALUES ('renamed_away', 'mail', 1, 0, 1, 65536,"""
        """ '{"required": ["user"], "accepted": null}')"""
    )
    with client(app) as http:
        page = http.get("/tasks").text
    assert "not in this app's code" in row(page, "renamed_away")
    assert cells(page, "renamed_away")[2] == "(user, **…)"


def test_the_page_is_in_the_header_and_served_read_only(app):
    app.register_tasks()
    with client(app, read_only=True) as http:
        assert 'id="nav-tasks"' in http.get("/").text
        assert 'id="task-send"' in http.get("/tasks").text
