"""The web dashboard: an ASGI app (Starlette) over a WorkerPool. ``pip install 'workerpool[web]'``.

    from workerpool.web import app
    dashboard = app(pool)                      # serve it, or mount it in your own app:
    Mount("/jobs", app=app(pool, read_only=True))
    app(pool, user=lambda request: User(request.user.name, "read_only"))   # who, may act

``workerpool web [APP:POOL]`` serves it with uvicorn (:mod:`workerpool.web.server`). The page
needs no internet: htmx and the stylesheet are served from the package, charts are inline SVG.
See docs/dashboard.md.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..model.errors import (
    CronDeclared,
    InvalidActor,
    InvalidFilter,
    ReplayRefused,
    ReplicaUnavailable,
    SignalExists,
    UnknownBatch,
    UnknownCron,
    UnknownJob,
    UnknownQueue,
    WorkerpoolError,
    WrongState,
    first_line,
)
from ..sql import revision
from . import (
    actions,
    api,
    audit_pages,
    batch_pages,
    cron_pages,
    pages,
    task_pages,
    workflow_pages,
)
from .access import Access, User, check_resolver
from .inputs import BadInput
from .render import Notices, render
from .security import Csrf, CsrfRefused, Guard, Hosts, token_from_env

__all__ = ["User", "app"]

log = logging.getLogger("workerpool.web")

FROM_ENV: Any = object()  # token default: $WORKERPOOL_WEB_TOKEN
BY_ACCESS: Any = object()  # hosts default: loopback names only when nothing else guards

#: Exceptions a person caused, answered with this status and their one-line message.
REFUSALS: list[tuple[type[BaseException], int]] = [
    (BadInput, 400),
    (InvalidFilter, 400),
    (CsrfRefused, 403),
    (UnknownJob, 404),
    (UnknownBatch, 404),
    (UnknownQueue, 404),
    (UnknownCron, 404),
    (CronDeclared, 409),
    (InvalidActor, 400),
    (ReplayRefused, 409),
    (WrongState, 409),
    (SignalExists, 409),
    (ReplicaUnavailable, 503),
    (WorkerpoolError, 400),
]


def app(
    pool: Any,
    *,
    read_only: bool = False,
    token: str | None = FROM_ENV,
    csrf_secret: bytes | None = None,
    user: Any = None,
    hosts: Any = BY_ACCESS,
) -> Any:
    """The dashboard of ``pool`` as an ASGI app.

    ``read_only``: no action route exists (POSTs get 404/405). ``token``: every request must
    carry it (Bearer, or the basic-auth password); default ``$WORKERPOOL_WEB_TOKEN``, ``None``
    for none (e.g. behind your own app's authentication). ``csrf_secret``: the key of the CSRF
    tokens, to share between several processes serving the same dashboard (default: random).
    ``user``: a callable(request) -> :class:`User` (name, "admin" or "read_only") or None
    (nobody: 403); see :mod:`workerpool.web.access`. Without it, actions are recorded as
    ``web@<client address>``.
    """
    token = token_from_env() if token is FROM_ENV else token
    resolver = check_resolver(user)
    if hosts is BY_ACCESS:
        hosts = () if token is None and resolver is None else None
    # The refusals are handled inside the app (a 4xx page); Exception goes to the outermost
    # handler, which answers 500 and lets the server log it.
    handlers: dict[Any, Any] = {kind: _failure for kind, _ in REFUSALS} | {Exception: _failure}
    starlette = Starlette(routes=routes(read_only), exception_handlers=handlers)
    starlette.state.pool = pool
    starlette.state.read_only = read_only
    starlette.state.csrf = Csrf(csrf_secret)
    starlette.state.notices = Notices()
    starlette.state.resolver = resolver
    starlette.state.token_set = token is not None
    return Guard(Access(starlette, resolver), token, Hosts(hosts))


def routes(read_only: bool) -> list[Any]:
    static = StaticFiles(packages=[("workerpool.web", "static")])
    found = [
        Route("/", pages.overview_page, name="overview"),
        Route("/jobs", pages.jobs_page, name="jobs"),
        Route("/search", pages.search, name="search"),
        Route("/jobs/{job_id}", pages.job_page, name="job"),
        Route("/dead", pages.dead_page, name="dead"),
        Route("/batches", batch_pages.batches_page, name="batches"),
        Route("/batches/{batch_id}", batch_pages.batch_page, name="batch"),
        Route("/workflows", workflow_pages.workflows_page, name="workflows"),
        Route("/workflows/{workflow_id}", workflow_pages.workflow_page, name="workflow"),
        Route("/sequences/{name:path}", workflow_pages.sequence_page, name="sequence"),
        Route("/tasks", task_pages.tasks_page, name="tasks"),
        Route("/cron", cron_pages.cron_page, name="cron"),
        Route("/audit", audit_pages.audit_page, name="audit"),
        Route("/api/jobs/{job_id}", api.read_job, methods=["GET"]),
        Mount("/static", app=static, name="static"),
    ]
    if not read_only:
        found += [
            Route("/api/jobs", api.create_job, methods=["POST"]),
            Route("/jobs/bulk", actions.bulk_action, methods=["POST"]),
            Route("/jobs/bulk-all", actions.bulk_matching, methods=["POST"]),
            Route("/jobs/{job_id}/retry", actions.retry_job, methods=["POST"]),
            Route("/jobs/{job_id}/rerun", actions.rerun_job, methods=["POST"]),
            Route("/jobs/{job_id}/cancel", actions.cancel_job, methods=["POST"]),
            Route("/jobs/{job_id}/run-now", actions.run_now, methods=["POST"]),
            Route("/jobs/{job_id}/purge", actions.purge_job, methods=["POST"]),
            Route("/jobs/{job_id}/signal", actions.send_signal, methods=["POST"]),
            Route("/dead/retry", actions.retry_dead, methods=["POST"]),
            Route("/dead/purge", actions.purge_dead, methods=["POST"]),
            Route("/queues/{queue}/pause", actions.pause_queue, methods=["POST"]),
            Route("/queues/{queue}/resume", actions.resume_queue, methods=["POST"]),
            Route("/cron/{name}/{verb}", cron_pages.cron_action, methods=["POST"]),
            Route("/cron-add", cron_pages.cron_add, methods=["POST"]),
        ]
    return found


async def _failure(request: Request, exc: Exception) -> Response:
    """A refusal: its status and one line. Anything else: 500, the type only (a database
    error's text could name the server; the log has the whole of it)."""
    for kind, status in REFUSALS:
        if isinstance(exc, kind):
            return render(request, "error.html", {"message": first_line(exc)}, status)
    if revision.is_missing(exc):  # a database never migrated: the line naming the fix
        message = first_line(request.app.state.pool.not_migrated(exc))
        return render(request, "error.html", {"message": message}, 503)
    log.exception(
        "dashboard request failed: %s %s",
        request.method,
        request.url.path,
        extra={"event": "web_request_failed"},
    )
    message = f"internal error ({type(exc).__name__}); the server's log has the details"
    return render(request, "error.html", {"message": message}, 500)
