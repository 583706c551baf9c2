"""The recipe's pool and handler: `workerpool run examples.django_shop.jobs:pool`.

The handler uses Django's ORM, so importing this module sets Django up (the worker process is
not started by Django). Each handler thread holds its own Django connection: the handler closes
stale ones before and after each job, as Django's request cycle would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import django
from django.db import close_old_connections

from workerpool import Job, WorkerPool

django.setup()  # needs $DJANGO_SETTINGS_MODULE; a no-op when Django is already set up

from .models import Order  # noqa: E402 - after setup(): models need the app registry

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL: the same database as Django's
pool.queue("orders", concurrency=2, poll_interval=0.2)


def django_job(fn: Callable[[Job], None]) -> Callable[[Job], None]:
    """Run a handler the way Django runs a view: stale connections closed around it."""

    @functools.wraps(fn)
    def run(job: Job) -> None:
        close_old_connections()
        try:
            fn(job)
        finally:
            close_old_connections()

    return run


@pool.task(queue="orders", name="confirm_order")
@django_job
def confirm_order(job: Job) -> None:
    """Stands in for e-mailing the confirmation: marks the order confirmed."""
    Order.objects.filter(pk=job.payload["order_id"]).update(confirmed=True)
