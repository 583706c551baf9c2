"""The dashboard's actions (POST only, CSRF-checked): retry, rerun, purge, cancel, pause,
resume.

Each calls the operation the command line calls (:mod:`workerpool.dead`, ``pool.cancel``,
``pool.pause``/``resume``), so the checks, the logging and the hooks are the same. A bulk retry
or purge is shown as a dry run first; only the confirmation form (``confirm=1``) changes rows.
With ``--read-only`` none of these routes exists.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..model.cancel import CANCELLED, STOPPING
from ..ops import bulk, dead, job_actions
from ..sql.control import running_with
from . import inputs
from .access import actor_of
from .render import redirect, render
from .security import CSRF_FIELD

MAX_FORM_FIELDS = 50


async def _form(request: Request) -> dict[str, Any]:
    """The form, after its CSRF token was checked against the cookie."""
    async with request.form(max_files=0, max_fields=MAX_FORM_FIELDS) as form:
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
    request.app.state.csrf.check(request.cookies, request.headers, fields)
    return fields


def _actor(request: Request) -> str:
    return actor_of(request)


async def retry_job(request: Request) -> Response:
    form = await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    pool = request.app.state.pool
    if inputs.flag(form, "cancelled"):
        await run_in_threadpool(
            lambda: job_actions.retry_cancelled(pool, job_id, by=_actor(request))
        )
        return redirect(request, f"/jobs/{job_id}", f"retried job {job_id}: it is pending again")
    result = await run_in_threadpool(dead.retry, pool, [job_id], by=_actor(request))
    if result.not_dead:
        return redirect(request, f"/jobs/{job_id}", f"job {job_id} is not dead: nothing changed")
    return redirect(request, "/dead", f"replayed job {job_id}: it is pending again")


async def rerun_job(request: Request) -> Response:
    """Run a finished job again from the step the form names (empty: from the start)."""
    form = await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    from_step = inputs.text(form, "from_step")
    pool = request.app.state.pool
    await run_in_threadpool(lambda: pool.rerun(job_id, from_step, by=_actor(request)))
    start = f"from step {from_step}" if from_step else "from the start"
    return redirect(request, f"/jobs/{job_id}", f"job {job_id} runs again {start}")


async def retry_dead(request: Request) -> Response:
    form = await _form(request)
    filters = inputs.dead_filter(form)
    confirm = inputs.flag(form, "confirm")
    pool = request.app.state.pool
    result = await run_in_threadpool(
        lambda: dead.retry(
            pool, all_matching=True, filters=filters, dry_run=not confirm, by=_actor(request)
        )
    )
    if confirm:
        return redirect(request, "/dead", f"replayed {len(result.ids)} dead jobs")
    return render(
        request,
        "confirm.html",
        {
            "action": "/dead/retry",
            "verb": "Replay",
            "count": len(result.ids),
            "by_task": sorted(result.by_task.items()),
            "form": _kept(form),
            "what": "dead jobs",
        },
    )


async def purge_dead(request: Request) -> Response:
    form = await _form(request)
    filters = inputs.dead_filter(form)
    older_than = inputs.duration(form, "older_than")
    confirm = inputs.flag(form, "confirm")
    pool = request.app.state.pool
    result = await run_in_threadpool(
        lambda: dead.purge(pool, older_than, filters, dry_run=not confirm, by=_actor(request))
    )
    if confirm:
        return redirect(request, "/dead", f"purged {result.count} dead jobs")
    return render(
        request,
        "confirm.html",
        {
            "action": "/dead/purge",
            "verb": "Purge",
            "count": result.count,
            "by_task": [],
            "form": _kept(form),
            "what": f"dead jobs older than {form.get('older_than')}",
        },
    )


def _kept(form: dict[str, Any]) -> dict[str, str]:
    """The fields the confirmation form sends again (not the token: it is added afresh)."""
    return {k: v for k, v in form.items() if k not in (CSRF_FIELD, "confirm") and v}


async def cancel_job(request: Request) -> Response:
    """Cancel one job; a running one only after a confirmation page says what may happen to
    the jobs sharing its process."""
    form = await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    reason = inputs.text(form, "reason")
    pool = request.app.state.pool
    if not inputs.flag(form, "confirm"):
        running = await run_in_threadpool(_running, pool, job_id)
        if running is not None:
            return render(request, "cancel_confirm.html", {"job": running, "reason": reason})
    result = await run_in_threadpool(
        lambda: pool.cancel([job_id], reason=reason, by=_actor(request))
    )
    verdict = result.verdicts.get(job_id)
    text = {CANCELLED: "cancelled", STOPPING: "asked to stop"}.get(verdict, verdict)
    return redirect(request, f"/jobs/{job_id}", f"job {job_id}: {text}")


def _running(pool: Any, job_id: int) -> dict[str, Any] | None:
    """A running job's worker, the other jobs that worker runs, and its queue's cancel grace
    (when the app declares the queue); None when the job is not running."""
    with pool.engine.connect() as conn:
        found = running_with(conn, job_id)
    if found is None:
        return None
    row, others = found
    grace = pool.queues[row.queue].cancel_grace if row.queue in pool.queues else None
    return {
        "id": job_id,
        "queue": row.queue,
        "task": row.task,
        "worker": row.claimed_by,
        "others": others,
        "grace": grace,
    }


async def run_now(request: Request) -> Response:
    await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    pool = request.app.state.pool
    was = await run_in_threadpool(lambda: job_actions.run_now(pool, job_id, by=_actor(request)))
    return redirect(
        request,
        f"/jobs/{job_id}",
        f"job {job_id} is due now (it was scheduled"
        f" for {was.isoformat(sep=' ', timespec='seconds')})",
    )


async def purge_job(request: Request) -> Response:
    form = await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    pool = request.app.state.pool
    if not inputs.flag(form, "confirm"):
        return render(
            request,
            "confirm.html",
            {
                "action": f"/jobs/{job_id}/purge",
                "verb": "Purge",
                "count": 1,
                "by_task": [],
                "form": {},
                "what": f"dead job {job_id} (its row, errors and logs)",
            },
        )
    await run_in_threadpool(lambda: job_actions.purge_one(pool, job_id, by=_actor(request)))
    return redirect(request, "/dead", f"purged job {job_id}")


async def send_signal(request: Request) -> Response:
    """Send the signal a waiting job waits for, with the form's JSON payload (if any)."""
    form = await _form(request)
    job_id = inputs.job_id(request.path_params["job_id"])
    name = inputs.text(form, "name")
    if name is None:
        raise inputs.BadInput("name the signal to send")
    payload = job_actions.check_signal_payload(inputs.text(form, "payload"))
    pool = request.app.state.pool
    await run_in_threadpool(
        lambda: job_actions.send_signal(pool, name, payload, by=_actor(request))
    )
    return redirect(request, f"/jobs/{job_id}", f"signal {name!r} sent")


async def pause_queue(request: Request) -> Response:
    return await _set_paused(request, True)


async def resume_queue(request: Request) -> Response:
    return await _set_paused(request, False)


async def _set_paused(request: Request, paused: bool) -> Response:
    await _form(request)
    queue = request.path_params["queue"]
    pool = request.app.state.pool
    verb = pool.pause if paused else pool.resume
    await run_in_threadpool(lambda: verb(queue, by=_actor(request)))
    return redirect(request, "/", f"queue {queue} {'paused' if paused else 'resumed'}")


async def bulk_matching(request: Request) -> Response:
    """Every job the jobs list's filter matches (the same fields, read the same way): a dry
    run of cancel or replay first, by state and task; the confirmation acts on those jobs up to
    the newest the dry run saw, through the ops layer."""
    form = await _form(request)
    action = inputs.choice(form, "action", bulk.ACTIONS)
    if action is None:
        raise inputs.BadInput(f"action must be one of {', '.join(bulk.ACTIONS)}")
    filters = inputs.job_filter(form)
    reason = inputs.text(form, "note")  # "reason" is the list's dead-reason filter
    pool = request.app.state.pool
    kept = {k: v for k, v in form.items() if k in inputs.LIST_FIELDS and v}
    if not inputs.flag(form, "confirm"):
        planned = await run_in_threadpool(bulk.plan_matching, pool, action, filters.where())
        return render(
            request,
            "bulk_all_confirm.html",
            {"plan": planned, "reason": reason, "filters": sorted(kept.items())},
        )
    upto = inputs.positive(form, "upto")
    changed = await run_in_threadpool(
        lambda: bulk.apply_matching(
            pool, action, filters.where(), upto, by=_actor(request), reason=reason
        )
    )
    verb = "cancelled (or asked to stop)" if action == "cancel" else "replayed"
    return redirect(
        request, "/jobs" + ("?" + urlencode(kept) if kept else ""), f"{changed} jobs {verb}"
    )


async def bulk_action(request: Request) -> Response:
    """The jobs list's ticked boxes: a dry run of cancel or replay first (every id checked:
    unknown ids, too many, a wrong state are refused with nothing changed); the confirmation
    form (``confirm=1``) applies it through the ops layer."""
    async with request.form(max_files=0, max_fields=bulk.MAX_BULK + 10) as form:
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        picked = [v for v in form.getlist("id") if isinstance(v, str)]
    request.app.state.csrf.check(request.cookies, request.headers, fields)
    action = inputs.choice(fields, "action", bulk.ACTIONS)
    if action is None:
        raise inputs.BadInput(f"action must be one of {', '.join(bulk.ACTIONS)}")
    ids = inputs.ids(picked)
    reason = inputs.text(fields, "reason")
    pool = request.app.state.pool
    if not inputs.flag(fields, "confirm"):
        planned = await run_in_threadpool(bulk.plan, pool, action, ids)
        return render(request, "bulk_confirm.html", {"plan": planned, "reason": reason})
    done = await run_in_threadpool(
        lambda: bulk.apply(pool, action, ids, by=_actor(request), reason=reason)
    )
    verb = "cancelled (or asked to stop)" if action == "cancel" else "replayed"
    return redirect(request, "/jobs", f"{len(done.states)} jobs {verb}")
