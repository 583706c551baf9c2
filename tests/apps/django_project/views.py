"""A view that writes an order and enqueues its confirmation in one ``transaction.atomic()``."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .models import Order
from .tasks import confirm_order


class Refused(Exception):
    """Rolls the order back: the backend's on-commit enqueue never happens."""


@csrf_exempt
def create_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    try:
        with transaction.atomic():
            order = Order.objects.create(email=email)
            result = confirm_order.enqueue(order.pk)
            if email.endswith(".invalid"):
                raise Refused(email)
    except Refused:
        return JsonResponse({"error": f"refused {email}", "result_id": result.id}, status=422)
    # The block has committed: the job is written and the result has its id.
    return JsonResponse({"order": order.pk, "result_id": result.id}, status=201)
