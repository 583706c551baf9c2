"""The project's tasks, as Django's Tasks API declares them."""

from __future__ import annotations

from .compat import task
from .models import Order


class Refused(Exception):
    """A task's own exception: its dotted path comes back in the result's errors."""


@task(queue_name="emails")
def confirm_order(order_id: int) -> dict:
    updated = Order.objects.filter(pk=order_id).update(confirmed=True)
    return {"order": order_id, "updated": updated}


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def refuse(reason: str) -> None:
    raise Refused(reason)


@task()
async def add_later(a: int, b: int) -> list[int]:
    return [a, b, a + b]


@task(takes_context=True)
def which_attempt(context, label: str) -> dict:  # Django passes the TaskContext first
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task()
def refuse_at_length(reason: str) -> None:
    """An exception whose message has several lines and a note: its path must survive both."""
    error = Refused(f"{reason}\nsecond line")
    error.add_note("a note")
    raise error


@task(takes_context=True)
def where_am_i(context) -> dict:
    """The task as the running attempt sees it: the enqueued queue, priority and backend."""
    task = context.task_result.task
    return {"queue": task.queue_name, "priority": task.priority, "backend": task.backend}
