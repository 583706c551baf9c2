"""The dashboard's batch pages: the open batches (and the latest finished ones), and one batch
with its progress bar, its callbacks and its members, a keyset page at a time.

Every read is bounded: a batch's counts are a range of its own index entries; the lists stop at
:data:`LISTED` batches and the members at a page.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from ..model.batch import RESULT_ORDER, status_of
from ..model.errors import UnknownBatch
from ..sql import batches, dashboard_reads
from ..sql.clock import database_now
from . import inputs, overview
from .render import render
from .tabs import ago, exact

#: Batches each list shows (open ones oldest first; finished ones newest first).
LISTED = 50
MEMBERS_PAGE = 50
#: The progress bar's segments, in order: (state, css class).
SEGMENTS = (
    ("done", "done"),
    ("dead", "dead"),
    ("cancelled", "cancelled"),
    ("running", "processing"),
    ("failed", "failed"),
    ("pending", "pending"),
)


def progress_bar(status: Any, width: int = 300) -> Markup:
    """An inline SVG bar (the page's policy allows no inline style): one segment per state."""
    total = max(status.total, 1)
    x, parts = 0.0, []
    for field, css in SEGMENTS:
        count = getattr(status, field)
        if not count:
            continue
        share = width * count / total
        parts.append(
            f'<rect x="{x:.2f}" y="0" width="{share:.2f}" height="12" class="{css}">'
            f"<title>{escape(field)}: {count}</title></rect>"
        )
        x += share
    label = escape(f"{status.done + status.dead + status.cancelled} of {status.total} ended")
    return Markup(
        f'<svg class="progress" viewBox="0 0 {width} 12" width="{width}" height="12"'
        f' role="img" aria-label="{label}"><title>{label}</title>'
        f'<rect x="0" y="0" width="{width}" height="12" class="track"/>' + "".join(parts) + "</svg>"
    )


def _read(request: Request) -> Any:
    pool = request.app.state.pool
    with pool.engines.replica_errors():
        conn = pool.read_engine.connect()
    conn.begin()
    dashboard_reads.limit_time(conn, overview.STATEMENT_TIMEOUT)
    return conn


def batches_page(request: Request) -> Response:
    with _read(request) as conn:
        opened = [
            status_of(row, batches.member_counts(conn, row.id))
            for row in batches.open_batches(conn, LISTED)
        ]
        open_count = len(opened) if len(opened) < LISTED else batches.count_open(conn)
        finished = [
            status_of(row, batches.member_counts(conn, row.id, row.callback_ids or []))
            for row in batches.finished_batches(conn, LISTED)
        ]
        now = database_now(conn)
    return render(
        request,
        "batches.html",
        {
            "opened": opened,
            "open_count": open_count,
            "finished": finished,
            "bar": progress_bar,
            "now": now,
            "ago": ago,
            "exact": exact,
        },
    )


def batch_page(request: Request) -> Response:
    batch_id = inputs.job_id(request.path_params["batch_id"])
    params = dict(request.query_params)
    state = params.get("state") or "done"
    if state not in RESULT_ORDER:
        raise inputs.BadInput(f"state must be one of {', '.join(RESULT_ORDER)}; got {state!r}")
    after = inputs.positive(params, "after") or 0
    with _read(request) as conn:
        row = batches.read_batch(conn, batch_id)
        if row is None:
            raise UnknownBatch(f"no batch {batch_id} (never opened, or pruned)")
        callback_ids = list(row.callback_ids or [])
        status = status_of(row, batches.member_counts(conn, batch_id, callback_ids))
        members = batches.member_page(conn, batch_id, state, after, MEMBERS_PAGE + 1, callback_ids)
        callbacks = batches.callback_states(conn, callback_ids)
        now = database_now(conn)
    more = len(members) > MEMBERS_PAGE
    members = members[:MEMBERS_PAGE]
    return render(
        request,
        "batch.html",
        {
            "status": status,
            "bar": progress_bar(status, 600),
            "members": members,
            "state": state,
            "states": RESULT_ORDER,
            "callbacks": callbacks,
            "next_after": members[-1].id if more else None,
            "now": now,
            "ago": ago,
            "exact": exact,
        },
    )
