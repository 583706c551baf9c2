"""The dashboard's pages (GET): overview, jobs list, one job, the dead-letter queue.

Every page reads in one short transaction with a statement timeout, so a slow query costs the
page an error, never a stuck connection. Handlers are plain functions: Starlette runs them in its
thread pool, beside the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..model.dependencies import AWAIT
from ..model.states import LIVE_STATES
from ..ops import job_story, job_view, timing, why
from ..ops.bulk import MAX_BULK
from ..ops.job_steps import steps_json
from ..ops.status import age
from ..sql import dashboard_reads
from ..sql.clock import database_now
from ..sql.schema import DEAD_REASONS, STATES
from . import inputs, overview, query
from .charts import bar_chart
from .render import prefix, render
from .tabs import ago, exact
from .tabs import state_tabs as tabs_of

LIST_PARAMS = (
    "q",
    "queue",
    "task",
    "state",
    "reason",
    "key",
    "since",
    "until",
    "limit",
    "tag",
    "batch",
    "workflow",
)


@contextmanager
def _read(pool: Any) -> Iterator[Any]:
    """A read transaction with the overview's statement timeout (and the planner's own
    choices: a key or an id filter is best served by its own index, then a sort)."""
    with pool.engines.replica_errors(), pool.read_engine.connect() as conn, conn.begin():
        dashboard_reads.limit_time(conn, overview.STATEMENT_TIMEOUT)
        yield conn


def overview_page(request: Request) -> Response:
    data = overview.collect(request.app.state.pool)
    note = "lower bound: more rows than were read" if data.chart_capped else ""
    titles = ("Finished per minute (done and cancelled)", "Dead per minute")
    charts = [
        (title, bar_chart(title, bars, css, note))
        for title, bars, css in zip(
            titles, (data.finished, data.failures), ("done", "dead"), strict=True
        )
    ]
    template = "_overview.html" if request.headers.get("hx-request") else "overview.html"
    return render(
        request,
        template,
        {"data": data, "charts": charts, "age": age, "analyzed_age": _ago(data.now, data.analyzed)},
    )


def _ago(now: Any, then: Any) -> str:
    return "never" if then is None else age((now - then).total_seconds()) + " ago"


def jobs_page(request: Request, *, dead_only: bool = False) -> Response:
    params: dict[str, Any] = dict(request.query_params)
    if dead_only:
        params["state"] = "dead"
        params.pop("until", None)  # the bulk retry and purge filter by "since" only
        params.pop("q", None)  # nor do they know the query box's payload terms
    filters = inputs.job_filter(params)
    limit = inputs.positive(params, "limit", inputs.DEFAULT_PAGE, inputs.MAX_PAGE)
    before = inputs.positive(params, "before")
    assert limit is not None
    by_finished = filters.by_finished  # as `workerpool dead list`: most recent deaths first
    with _read(request.app.state.pool) as conn:
        rows = dashboard_reads.browse_all(conn, filters, before, limit + 1)
        total = dashboard_reads.count_all(conn, filters)
        tabs = [] if dead_only else tabs_of(conn, filters)
        now = database_now(conn)
    more = len(rows) > limit
    rows = rows[:limit]
    kept = {k: v for k, v in params.items() if k in LIST_PARAMS and v and k != "state"}
    if not dead_only and params.get("state"):
        kept["state"] = params["state"]
    context = {
        "rows": rows,
        "total": total,
        "cap": dashboard_reads.COUNT_CAP,
        "params": params,
        "states": STATES,
        "reasons": DEAD_REASONS,
        "dead_only": dead_only,
        "by_finished": by_finished,
        "older": _query(kept, before=rows[-1].id) if more else None,
        "newest": _query(kept) if before else None,
        "tabs": tabs,
        "signature": _signature(request.app.state.pool, params.get("task")),
        "now": now,
        "ago": ago,
        "exact": exact,
        "max_bulk": MAX_BULK,
        "active_state": filters.state or "",
        "dead_filters": inputs.DEAD_FILTERS,
        "list_fields": inputs.LIST_FIELDS,
        "tab_query": lambda state: _query(
            {k: v for k, v in kept.items() if k != "state"} | ({"state": state} if state else {})
        ),
    }
    if request.headers.get("hx-request") and request.headers.get("hx-target") == "job-table":
        # the tabs follow the filter too (swapped out of band), and the address bar shows only
        # the fields that filter (the form sends every one, empty or not)
        page = "/dead" if dead_only else "/jobs"
        response = render(request, "_jobs_update.html", context)
        response.headers["HX-Push-Url"] = prefix(request) + page + (_query(kept) if kept else "")
        return response
    return render(request, "dead.html" if dead_only else "jobs.html", context)


def _query(params: Mapping[str, Any], **extra: Any) -> str:
    return "?" + urlencode({**params, **extra})


def search(request: Request) -> Response:
    """The header's search: a job id opens its page, a query (``task:send args.user.id:42``)
    lists its matches, anything else lists the jobs of that key."""
    job_id, key = inputs.search(request.query_params)
    if job_id is None and query.looks_like_query(key):
        query.parse(key)  # a bad query is refused here, with its line
        target = "/jobs" + _query({"q": key})
    else:
        target = f"/jobs/{job_id}" if job_id is not None else "/jobs" + _query({"key": key})
    return RedirectResponse(prefix(request) + target, status_code=303)


def _signature(pool: Any, task: str | None) -> str | None:
    """A typed task's signature, shown above a list filtered by that task."""
    spec = pool.registry.tasks.get(task) if task else None
    signature = spec.signature if spec is not None else None
    if signature is None or not signature.typed:
        return None
    return f"{signature.task}{signature.shown()}"


def _arguments(pool: Any, row: Any) -> dict[str, Any] | None:
    """A typed task's payload by argument name, each value as pretty JSON."""
    shown = job_story.arguments(pool.registry, row.task, row.payload)
    if shown is None:
        return None
    rows = [{**a, "shown": _json(a["value"])} for a in shown["arguments"]]
    return {"signature": shown["signature"], "arguments": rows}


def dead_page(request: Request) -> Response:
    return jobs_page(request, dead_only=True)


def job_page(request: Request) -> Response:
    pool = request.app.state.pool
    job_id = inputs.job_id(request.path_params["job_id"])
    known = why.app_tasks(pool) if pool.tasks else None
    with _read(pool) as conn:
        answer = why.explain(conn, job_id, known)
        row = answer.job
        holder = dashboard_reads.lease_holder(conn, row.claimed_by) if row.claimed_by else None
        logs = job_view.attempt_logs(conn, job_id)
    return render(
        request,
        "job.html",
        {
            "job": row,
            "holder": holder,
            "reasons": answer.reasons,
            "awaited": [
                p for p in answer.facts.parents if p.kind == AWAIT and p.state in LIVE_STATES
            ],
            "age": age,
            "payload": _pretty(row.payload),
            "arguments": _arguments(pool, row),
            "checkpoint": _pretty(row.checkpoint),
            "result": _pretty(row.result),
            "steps": [
                {**step, "shown": _json(step["value"])} for step in steps_json(row.steps, row.now)
            ],
            "cancel_request": _pretty(row.cancel_request),
            "progress": job_view.progress_text(row.progress),
            "fraction": _fraction(row.progress),
            "logs": logs,
            "lease_age": age((row.now - row.claimed_at).total_seconds())
            if row.claimed_at
            else None,
            "timing": timing.timing(row, row.now),
            "ago": ago,
            "exact": exact,
        },
    )


def _fraction(progress: Any) -> float | None:
    """A fraction reported by ``job.progress`` (drawn as a bar), else None."""
    value = (progress or {}).get("value")
    return float(value) if isinstance(value, int | float) else None


def _pretty(value: Any) -> str | None:
    if value is None:
        return None
    return _json(value)


def _json(value: Any) -> str:
    """A stored JSON value as JSON (a step that returned nothing shows ``null``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
