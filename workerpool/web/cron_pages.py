"""The /cron page: each schedule's code default beside its run-time state, with pause, resume,
run-now and (for a schedule added at run time) remove buttons, and a form that adds one (POST,
CSRF-checked, calling the same ``pool.cron_*`` as the command line, so each change is recorded
in the audit trail with the dashboard's user)."""

from __future__ import annotations

import uuid

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..ops.crons import list_crons
from ..ops.job_actions import check_signal_payload
from ..sql.clock import database_now
from . import inputs
from .actions import _actor, _form
from .inputs import BadInput
from .render import redirect, render
from .tabs import ago, exact

VERBS = ("pause", "resume", "run", "remove")


def cron_page(request: Request) -> Response:
    pool = request.app.state.pool
    views = list_crons(pool)
    with pool.engine.connect() as conn:  # times read relative to the database's clock
        now = database_now(conn)
    return render(
        request,
        "cron.html",
        {
            "crons": views,
            "tasks": sorted(pool.tasks),
            "request_id": uuid.uuid4().hex,
            "now": now,
            "ago": ago,
            "exact": exact,
        },
    )


async def cron_action(request: Request) -> Response:
    """``POST /cron/{name}/{pause|resume|run}``; ``request`` (a form field the page fills in)
    makes a double-submitted run one job."""
    verb = request.path_params["verb"]
    if verb not in VERBS:
        raise BadInput(f"unknown cron action {verb!r}: use pause, resume, run or remove")
    form = await _form(request)
    name = request.path_params["name"]
    pool, by = request.app.state.pool, _actor(request)
    if verb == "run":
        job_id = await run_in_threadpool(
            lambda: pool.cron_run(name, by=by, request=form.get("request") or None)
        )
        return redirect(request, "/cron", f"cron {name}: job {job_id} enqueued")
    if verb == "remove":
        await run_in_threadpool(lambda: pool.cron_remove(name, by=by))
        return redirect(request, "/cron", f"cron {name} removed")
    change = pool.cron_pause if verb == "pause" else pool.cron_resume
    await run_in_threadpool(lambda: change(name, by=by))
    return redirect(request, "/cron", f"cron {name} {verb}d")


async def cron_add(request: Request) -> Response:
    """``POST /cron-add``: ``pool.cron_add`` from the form (name, expression, task, payload as
    a JSON object, timezone); a bad field is a 4xx naming it, nothing written."""
    form = await _form(request)
    name, expression, task = (inputs.text(form, f) for f in ("name", "expression", "task"))
    if not name or not expression or not task:
        raise BadInput("a schedule needs a name, an expression and a task")
    payload = check_signal_payload(inputs.text(form, "payload"))
    timezone = inputs.text(form, "timezone") or "UTC"
    pool, by = request.app.state.pool, _actor(request)
    await run_in_threadpool(
        lambda: pool.cron_add(
            name, expression, task=task, payload=payload, timezone=timezone, by=by
        )
    )
    return redirect(request, "/cron", f"cron {name} added: {expression} enqueues {task}")
