"""examples/fastapi_app.py: FastAPI's TestClient posts signups while a real `workerpool run`
serves the recipe's pool; a committed request's job runs, a rolled-back one leaves no job."""

from __future__ import annotations

import signal

from fastapi.testclient import TestClient

from examples import fastapi_app
from tests.helpers.recipes import workerpool_run
from tests.helpers.waiting import wait_until
from workerpool.client import Engines


def test_the_job_runs_iff_the_request_commits(db_url, sql, tmp_path, monkeypatch):
    url = db_url.render_as_string(hide_password=False)
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", url)
    monkeypatch.setattr(fastapi_app.pool, "engines", Engines(None))  # on this test's database
    with (
        TestClient(fastapi_app.app) as client,
        workerpool_run("examples.fastapi_app:pool", url, tmp_path) as sup,
    ):
        created = client.post("/signups", json={"email": "ada@example.com"})
        assert created.status_code == 201, created.text
        signup_id, job_id = created.json()["id"], created.json()["job_id"]

        refused = client.post("/signups", json={"email": "bob@example.invalid"})
        assert refused.status_code == 422, refused.text

        wait_until(
            lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)],
            60,
            message=f"the welcome job ran\n{sup.log()}",
        )
        assert sql("SELECT welcomed FROM signups WHERE id = %s", signup_id) == [(True,)]
        assert sql("SELECT id, task, state FROM workerpool_jobs") == [
            (job_id, "send_welcome", "done")
        ]  # the refused signup's job was rolled back
        assert sql("SELECT email FROM signups") == [("ada@example.com",)]
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.wait_exit(30) == 0


def test_a_request_after_the_servers_sessions_ended_is_served(db_url, sql, monkeypatch):
    """The recipe's engine pings a pooled connection before use: a PostgreSQL restart (here:
    every session of the database ended) costs no request a 500."""
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", db_url.render_as_string(hide_password=False))
    monkeypatch.setattr(fastapi_app.pool, "engines", Engines(None))
    with TestClient(fastapi_app.app) as client:
        assert client.post("/signups", json={"email": "ada@example.com"}).status_code == 201
        ended = sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert ended[0][0] >= 1
        again = client.post("/signups", json={"email": "grace@example.com"})
        assert again.status_code == 201, again.text
