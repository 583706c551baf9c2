"""The HTTP door: ``POST /api/jobs`` and ``GET /api/jobs/{id}`` on the dashboard, behind a
Bearer token; bad input is a 4xx with one line and nothing written."""

from __future__ import annotations

import base64
import json

import pytest

from tests.helpers.web import client
from workerpool import WorkerPool
from workerpool.testing import drain
from workerpool.web import User

TOKEN = "s3cret-token-for-the-api"
BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("email")
    pool.queue("tiny", max_pending=1)

    @pool.task(queue="email", max_attempts=4)
    def send(job):
        return {"to": job.payload.get("to")}

    @pool.task(queue="email")
    def greet(job, email, name="friend"):
        return None

    @pool.task(queue="tiny")
    def one(job):
        return None

    pool.register_tasks()
    return pool


@pytest.fixture
def api(app):
    with client(app, token=TOKEN) as http:
        yield http


def count(sql) -> int:
    return sql("SELECT count(*) FROM workerpool_jobs")[0][0]


def post(http, body, headers=BEARER, **options):
    return http.post(
        "/api/jobs",
        content=json.dumps(body),
        headers={"content-type": "application/json", **headers},
        **options,
    )


def test_a_job_posted_runs_and_its_state_and_result_read_back(app, api, sql):
    answer = post(api, {"task": "send", "payload": {"to": "ada"}, "key": "k1", "priority": 3})
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    assert sql("SELECT task, payload, key, priority, max_attempts FROM workerpool_jobs") == [
        ("send", {"to": "ada"}, "k1", 3, 4)
    ]
    assert api.get(f"/api/jobs/{job_id}", headers=BEARER).json()["state"] == "pending"
    drain(app, "email")
    read = api.get(f"/api/jobs/{job_id}", headers=BEARER)
    assert read.status_code == 200
    assert {k: read.json()[k] for k in ("id", "state", "result", "attempts")} == {
        "id": job_id,
        "state": "done",
        "result": {"to": "ada"},
        "attempts": 1,
    }
    again = post(api, {"task": "send", "payload": {"to": "ada"}, "key": "k1", "priority": 3})
    assert again.json() == {"id": job_id}


def test_run_at_with_an_offset_is_kept(api, sql):
    answer = post(api, {"task": "send", "run_at": "2030-01-02T03:04:05+02:00"})
    assert answer.status_code == 201
    assert sql("SELECT run_at = '2030-01-02T01:04:05Z' FROM workerpool_jobs") == [(True,)]


@pytest.mark.parametrize(
    ("headers", "line"),
    [
        ({}, "authentication required"),
        ({"authorization": "Bearer wrong-token-of-enough-length"}, "authentication required"),
        # a browser replays basic auth on its own: the API takes the Bearer form only
        (
            {"authorization": "Basic " + base64.b64encode(f"u:{TOKEN}".encode()).decode()},
            '{"error":"the API needs a bearer token',
        ),
    ],
)
def test_without_the_bearer_token_nothing_is_written(api, sql, headers, line):
    answer = post(api, {"task": "send"}, headers=headers)
    assert answer.status_code == 401
    assert answer.text.startswith(line)
    assert api.get("/api/jobs/1", headers=headers).status_code == 401
    assert count(sql) == 0


def test_a_dashboard_without_a_token_serves_no_api(app, sql):
    with client(app) as http:
        answer = post(http, {"task": "send"}, headers={"authorization": "Bearer anything"})
    assert answer.status_code == 401
    assert answer.json() == {"error": "the API needs WORKERPOOL_WEB_TOKEN set on the server"}
    assert count(sql) == 0


def test_a_read_only_user_reads_but_cannot_enqueue(app, sql):
    job_id = app.enqueue("send", {})
    with client(app, user=lambda request: User("viewer", "read_only")) as http:
        assert post(http, {"task": "send"}, headers={}).status_code == 403
        assert http.get(f"/api/jobs/{job_id}").json()["state"] == "pending"
    with client(app, read_only=True, token=TOKEN) as http:
        assert post(http, {"task": "send"}).status_code in (404, 405)
    assert count(sql) == 1


@pytest.mark.parametrize(
    ("body", "status", "line"),
    [
        ("not json", 400, "the body is not JSON"),
        ('{"task": "send", "payload": {"x": NaN}}', 400, "the body is not JSON: NaN is not JSON"),
        ("[1]", 400, "the body must be a JSON object, got list"),
        ({"task": "send", "colour": 1}, 400, "unknown field(s) colour"),
        ({"payload": {}}, 400, "task must be a task's name"),
        ({"task": "nope"}, 404, "unknown task 'nope'"),
        ({"task": "send", "payload": [1]}, 400, "payload must be a JSON object, got list"),
        ({"task": "send", "payload": {"a": "\u0000"}}, 400, "unsupported Unicode escape"),
        ({"task": "send", "payload": {"a": "x" * 70_000}}, 400, "payload is 70009 bytes"),
        ({"task": "send", "priority": "high"}, 400, "priority must be an integer"),
        ({"task": "send", "priority": 99999}, 400, "priority must be within"),
        ({"task": "send", "max_attempts": 0}, 400, "max_attempts must be within 1..1000"),
        ({"task": "send", "run_at": "2030-01-02T03:04:05"}, 400, "run_at must be an ISO 8601"),
        ({"task": "send", "run_at": "soon"}, 400, "run_at must be an ISO 8601"),
        ({"task": "send", "queue": "sms"}, 400, "task send runs on queue 'email'"),
        ({"task": "send", "key": " "}, 400, "key must be a non-empty string"),
        ({"task": "send", "tags": "a"}, 400, "tags must be a list of strings"),
        ({"task": "greet", "payload": {"name": "x"}}, 400, "task greet needs argument(s) email"),
    ],
)
def test_bad_input_is_a_4xx_with_one_line_and_nothing_written(api, sql, body, status, line):
    content = body if isinstance(body, str) else json.dumps(body)
    answer = api.post(
        "/api/jobs", content=content, headers={"content-type": "application/json", **BEARER}
    )
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error.startswith(line), error
    assert "\n" not in error
    assert count(sql) == 0


def test_a_body_that_is_not_json_typed_is_refused(api, sql):
    answer = api.post(
        "/api/jobs", content='{"task": "send"}', headers={"content-type": "text/plain", **BEARER}
    )
    assert answer.status_code == 415
    assert count(sql) == 0


def test_a_full_queue_is_429_and_a_held_key_409(api, sql):
    assert post(api, {"task": "one"}).status_code == 201
    full = post(api, {"task": "one"})
    assert full.status_code == 429
    assert full.json()["error"] == "queue tiny is full: it holds its bound of 1 jobs waiting to run"
    assert post(api, {"task": "send", "payload": {"a": 1}, "key": "k"}).status_code == 201
    held = post(api, {"task": "send", "payload": {"a": 2}, "key": "k"})
    assert held.status_code == 409
    assert count(sql) == 2


@pytest.mark.parametrize(("path", "status"), [("/api/jobs/999", 404), ("/api/jobs/x1", 400)])
def test_reading_a_missing_or_malformed_id(api, path, status):
    answer = api.get(path, headers=BEARER)
    assert answer.status_code == status
    assert answer.json()["error"]


def test_the_overview_shows_a_queues_bound(app, api):
    app.enqueue("one", {})
    page = api.get("/", headers=BEARER)
    assert page.status_code == 200
    row = page.text.split('href="/jobs?queue=tiny">tiny</a>')[1].split("</tr>")[0]
    assert '<span class="bound"' in row and ">/ 1</span>" in row
    email = page.text.split('href="/jobs?queue=email">email</a>')[1].split("</tr>")[0]
    assert 'class="bound"' not in email
