"""examples/django_shop: Django's test client posts orders on a real PostgreSQL database while a
real `workerpool run` serves the recipe's pool; a committed order's job runs, a rolled-back one
is never enqueued. Django is configured in-code (settings module from the environment), once."""

from __future__ import annotations

import signal

import django
from django.core.management import call_command
from django.db import connections
from django.test import Client

from tests.helpers.waiting import wait_until
from tests.processes.recipes import workerpool_run

SETTINGS = "examples.django_shop.settings"


def test_a_committed_order_is_confirmed_and_a_rolled_back_one_never_enqueued(
        db_url, sql, tmp_path, monkeypatch):
    url = db_url.render_as_string(hide_password=False)
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", url)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", SETTINGS)
    django.setup()  # reads the settings, and so this test's database, once per process
    from examples.django_shop.jobs import pool

    try:
        call_command("migrate", run_syncdb=True, verbosity=0)  # the app's table
        client = Client()
        with workerpool_run("examples.django_shop.jobs:pool", url, tmp_path,
                            DJANGO_SETTINGS_MODULE=SETTINGS) as sup:
            created = client.post("/orders", {"email": "ada@example.com"},
                                  content_type="application/json")
            assert created.status_code == 201, created.content
            order_id, job_id = created.json()["id"], created.json()["job_id"]

            refused = client.post("/orders", {"email": "bob@example.invalid"},
                                  content_type="application/json")
            assert refused.status_code == 422

            wait_until(lambda: sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)
                       == [("done",)], 60, message=f"the confirmation job ran\n{sup.log()}")
            assert sql("SELECT id, confirmed FROM django_shop_order") == [(order_id, True)]
            assert sql("SELECT key FROM workerpool_jobs") == [(f"order:{order_id}",)]
            sup.proc.send_signal(signal.SIGTERM)
            assert sup.wait_exit(30) == 0
    finally:
        connections.close_all()
        pool.dispose()
