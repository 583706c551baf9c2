"""examples/django_shop: Django's test client posts orders on a real PostgreSQL database while a
real `workerpool run` serves the recipe's pool; a committed order's job runs, a rolled-back one
is never enqueued. Django is configured in-code (settings module from the environment), once.
It also shows why the recipe does not share Django's transaction (see the last helper)."""

from __future__ import annotations

import signal

import django
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client
from sqlalchemy import create_engine, text
from sqlalchemy import pool as sa_pool

from tests.helpers.recipes import workerpool_run
from tests.helpers.waiting import wait_until

SETTINGS = "examples.django_shop.settings"


def test_a_committed_order_is_confirmed_and_a_rolled_back_one_never_enqueued(
    db_url, sql, tmp_path, monkeypatch
):
    url = db_url.render_as_string(hide_password=False)
    monkeypatch.setenv("WORKERPOOL_DATABASE_URL", url)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", SETTINGS)
    django.setup()  # reads the settings, and so this test's database, once per process
    from examples.django_shop.jobs import pool

    try:
        call_command("migrate", run_syncdb=True, verbosity=0)  # the app's table
        client = Client()
        with workerpool_run(
            "examples.django_shop.jobs:pool", url, tmp_path, DJANGO_SETTINGS_MODULE=SETTINGS
        ) as sup:
            created = client.post(
                "/orders", {"email": "ada@example.com"}, content_type="application/json"
            )
            assert created.status_code == 201, created.content
            order_id, job_id = created.json()["id"], created.json()["job_id"]

            refused = client.post(
                "/orders", {"email": "bob@example.invalid"}, content_type="application/json"
            )
            assert refused.status_code == 422

            wait_until(
                lambda: (
                    sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)]
                ),
                60,
                message=f"the confirmation job ran\n{sup.log()}",
            )
            assert sql("SELECT id, confirmed FROM django_shop_order") == [(order_id, True)]
            assert sql("SELECT key FROM workerpool_jobs") == [(f"order:{order_id}",)]
            sup.proc.send_signal(signal.SIGTERM)
            assert sup.wait_exit(30) == 0
        assert_sharing_django_transaction_loses_the_order()
    finally:
        connections.close_all()
        pool.dispose()


class BorrowedPool(sa_pool.Pool):
    """A SQLAlchemy pool over Django's own connection: hands it out, never closes it."""

    def _do_get(self):
        return self._create_connection()

    def _do_return_conn(self, record):
        pass

    def dispose(self):
        pass

    def recreate(self):
        return self

    def status(self):
        return "borrowed"


def assert_sharing_django_transaction_loses_the_order():
    """Why the recipe enqueues in on_commit (docs/recipes/django.md): a SQLAlchemy Connection
    over Django's connection rolls Django's atomic block back when it is closed."""
    from examples.django_shop.jobs import pool
    from examples.django_shop.models import Order

    def django_connection():
        connection.ensure_connection()
        return connection.connection

    engine = create_engine(
        pool.url, creator=django_connection, poolclass=BorrowedPool, pool_reset_on_return=None
    )
    with transaction.atomic():
        order = Order.objects.create(email="shared@example.com")
        with engine.connect() as conn:  # what enqueue(conn=...) needs
            assert conn.execute(text("SELECT 1")).scalar() == 1
    assert not Order.objects.filter(pk=order.pk).exists()  # committed nothing: rolled back
