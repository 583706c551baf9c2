"""The /tasks page: each task as its workers last registered it (``workerpool_tasks``), which is
what SQL's ``workerpool_enqueue`` and ``POST /api/jobs`` know of it: its queue (and that
queue's bound), the defaults an enqueue takes from it, the arguments they check, and when a
worker last wrote it. Tasks of the served app that no worker registered yet are named too: the
doors refuse them until one does."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..sql import doors
from ..sql.clock import database_now
from .pages import _read
from .render import render
from .tabs import ago, exact


def tasks_page(request: Request) -> Response:
    pool = request.app.state.pool
    with _read(pool) as conn:  # times read relative to the database's clock
        rows = doors.read_tasks(conn)
        now = database_now(conn)
    registered = {row.task for row in rows}
    in_app = set(pool.tasks)
    return render(
        request,
        "tasks.html",
        {
            "tasks": [
                {"row": row, "arguments": arguments(row.params), "in_app": row.task in in_app}
                for row in rows
            ],
            "app_has_tasks": bool(in_app),
            "unregistered": sorted(in_app - registered),
            "now": now,
            "ago": ago,
            "exact": exact,
        },
    )


def arguments(params: dict[str, Any] | None) -> str:
    """A registered task's arguments as a signature: ``(to, subject, cc=…)``, ``**…`` when it
    takes any other; a task that takes its payload as a dict takes any JSON object."""
    if params is None:
        return "any JSON object"
    required = list(params.get("required") or [])
    accepted = params.get("accepted")
    optional = [f"{name}=…" for name in accepted or [] if name not in required]
    rest = ["**…"] if accepted is None else []
    return "(" + ", ".join(required + optional + rest) + ")"
