"""The /audit page: who did what and when (cancel, retry, purge, pause, cron changes), newest
first, filtered by actor or action, a page at a time (``before`` = the last id shown)."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from ..ops.audit import ACTIONS, list_audit
from . import inputs
from .render import render
from .tabs import ago, exact

PAGE = 50


def audit_page(request: Request) -> Response:
    params = request.query_params
    actor = inputs.text(params, "actor")
    action = inputs.choice(params, "action", ACTIONS)
    before = inputs.positive(params, "before")
    page = list_audit(request.app.state.pool, actor=actor, action=action, before=before, limit=PAGE)
    kept = {k: v for k, v in (("actor", actor), ("action", action)) if v}
    older = None if page.before is None else urlencode({**kept, "before": page.before})
    return render(
        request,
        "audit.html",
        {
            "entries": page.entries,
            "actions": ACTIONS,
            "now": datetime.now(UTC),
            "ago": ago,
            "exact": exact,
            "actor": actor or "",
            "action": action or "",
            "older": older,
        },
    )
