"""The view: the order commits, then its job is enqueued (``transaction.on_commit``).

Why not enqueue inside ``transaction.atomic()`` on Django's connection: workerpool writes through
a SQLAlchemy Connection, and a SQLAlchemy Connection opened over Django's psycopg connection owns
the transaction on it. Closing it (as every ``with engine.connect()`` does) rolls back, silently,
Django's whole atomic block, order included; only a Connection that is never closed leaves
Django's transaction alone. So the enqueue waits for Django's commit and uses the pool's own
connection; docs/recipes/django.md says what that costs.
"""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .jobs import pool
from .models import Order


class Refused(Exception):
    pass


@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    job_ids: list[int] = []
    try:
        with transaction.atomic():
            order = Order.objects.create(email=email)
            transaction.on_commit(
                lambda: job_ids.append(
                    pool.enqueue("confirm_order", {"order_id": order.pk}, key=f"order:{order.pk}")
                )
            )
            if email.endswith(".invalid"):
                raise Refused  # rolls back the order: on_commit callbacks are dropped, no job
    except Refused:
        return JsonResponse({"error": "this address cannot receive mail"}, status=422)
    return JsonResponse({"id": order.pk, "job_id": job_ids[0]}, status=201)
