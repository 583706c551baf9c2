"""The project's tasks, as Django's Tasks API declares them."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from workerpool.contrib.django import complete_in, step
from workerpool.model.errors import CompletionRefused

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


@task()
def charge_once(email: str, roll_back: bool = False) -> dict:
    """Its Order and its job's ``done`` in one atomic block on Django's connection; a block
    rolled back after ``complete_in`` leaves the job to the return below."""
    try:
        with transaction.atomic():
            Order.objects.create(email=email, confirmed=True)
            complete_in({"charged": email})
            if roll_back:
                raise Refused(email)
    except Refused:
        return {"rolled back": email}
    return {"ignored": "the block committed the job's outcome"}


@task()
async def charge_once_async(email: str) -> dict:
    """``charge_once`` as an ``async def`` task: its block in a sync function run with
    ``sync_to_async``, with a step; what ``complete_in`` said on the event loop goes in the
    result."""
    try:
        complete_in({"on the loop": email})
        on_the_loop = "not refused"
    except CompletionRefused as exc:
        on_the_loop = f"{type(exc).__name__}: {exc}"

    def charge() -> None:
        with transaction.atomic():
            order = step("order", lambda: Order.objects.create(email=email, confirmed=True).pk)
            complete_in({"charged": email, "order": order, "on the loop": on_the_loop})

    await sync_to_async(charge)()
    return {"ignored": "the block committed the job's outcome"}


#: What ``misuse`` caught, by case: it runs in the test's process (``drain``).
CAUGHT: dict[str, str] = {}


@task(takes_context=True)
def misuse(context, how: str) -> None:
    """``complete_in`` as it must be refused: what it raised goes to CAUGHT."""
    email = f"{how}@example.com"
    try:
        if how == "outside a block":
            complete_in()
        elif how == "on another database":
            with transaction.atomic(using="jobs"):
                complete_in(using="jobs")
        elif how == "twice":
            with transaction.atomic():
                complete_in({"first": True})
                try:
                    complete_in()
                finally:
                    transaction.set_rollback(True)
        elif how == "after its lease was lost":
            with connection.cursor() as cursor:  # autocommit: another worker took the job
                cursor.execute(
                    "UPDATE workerpool_jobs SET claimed_by = 'thief' WHERE id = %s",
                    [int(context.task_result.id)],
                )
            with transaction.atomic():
                Order.objects.create(email=email)
                complete_in({"charged": email})
    except CompletionRefused as exc:
        CAUGHT[how] = f"{type(exc).__name__}: {exc}"


@task()
def two_steps() -> None:
    """A step whose block commits, and one whose block rolls back: its Order and its record."""
    with transaction.atomic():
        step("kept", lambda: Order.objects.create(email="kept@example.com").pk)
    with transaction.atomic():
        step("undone", lambda: Order.objects.create(email="undone@example.com").pk)
        transaction.set_rollback(True)
