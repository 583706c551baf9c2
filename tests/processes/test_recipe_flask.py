"""examples/flask_app.py: Flask's test client creates invoices through an ORM Session while a
real `workerpool run` serves the recipe's pool; the job commits with the session or not at all."""

from __future__ import annotations

import signal

from examples import flask_app
from tests.helpers.recipes import workerpool_run
from tests.helpers.waiting import wait_until
from workerpool.client import Engines


def test_the_job_commits_with_the_orm_session(db_url, sql, tmp_path, monkeypatch):
    url = db_url.render_as_string(hide_password=False)
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", url)
    monkeypatch.setattr(flask_app.pool, "engines", Engines(None))  # on this test's database
    app = flask_app.create_app()
    client = app.test_client()
    try:
        with workerpool_run("examples.flask_app:pool", url, tmp_path) as sup:
            created = client.post("/invoices", json={"customer": "ada@example.com"})
            assert created.status_code == 201, created.text
            invoice_id, job_id = created.json["id"], created.json["job_id"]

            refused = client.post("/invoices", json={"customer": "bob@example.invalid"})
            assert refused.status_code == 422

            wait_until(
                lambda: (
                    sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)]
                ),
                60,
                message=f"the invoice job ran\n{sup.log()}",
            )
            assert sql("SELECT id, sent FROM invoices") == [(invoice_id, True)]
            assert sql("SELECT id FROM workerpool_jobs") == [(job_id,)]
            sup.proc.send_signal(signal.SIGTERM)
            assert sup.wait_exit(30) == 0
    finally:
        app.extensions["engine"].dispose()
        flask_app.pool.dispose()
