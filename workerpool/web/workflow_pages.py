"""The dashboard's workflow page: a chain's or a workflow's jobs drawn as a graph, server-side
SVG like the charts (no script, nothing fetched), each node coloured by its job's state and
linked to its job page; and a sequence's page: the jobs in its line, head first.

The layout is by depth: a node sits one column right of its deepest parent (the order comes
from ``graphlib``), its row is its place among the nodes of that column. Every read is bounded:
at most :data:`NODES` jobs of the workflow, in id order.
"""

from __future__ import annotations

import graphlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from ..model.dependencies import check_sequence
from ..model.errors import InvalidDependency, UnknownJob
from ..model.states import LIVE_STATES
from ..sql import dependencies
from ..sql.clock import database_now
from . import inputs
from .batch_pages import _read, progress_bar
from .render import prefix, render
from .tabs import ago, exact

#: Jobs a workflow page draws at most.
NODES = 200
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 34, 50, 14, 10


def layout(nodes: Sequence[Any], edges: Sequence[Any]) -> dict[int, tuple[int, int]]:
    """Job id → (column, row): a node one column right of its deepest parent."""
    ids = {node.id for node in nodes}
    parents: dict[int, set[int]] = {job_id: set() for job_id in ids}
    for edge in edges:
        if edge.job_id in ids and edge.parent_id in ids:
            parents[edge.job_id].add(edge.parent_id)
    column: dict[int, int] = {}
    for job_id in graphlib.TopologicalSorter(parents).static_order():
        column[job_id] = 1 + max((column[p] for p in parents[job_id]), default=-1)
    rows: dict[int, int] = {}
    out = {}
    for job_id in sorted(ids):
        col = column[job_id]
        out[job_id] = (col, rows.get(col, 0))
        rows[col] = rows.get(col, 0) + 1
    return out


def graph(nodes: Sequence[Any], edges: Sequence[Any], base: str) -> Markup:
    """The workflow as an inline SVG: a box per job (class: its state), a line per edge."""
    places = layout(nodes, edges)
    width = PAD * 2 + (max((c for c, _ in places.values()), default=0) + 1) * (NODE_W + GAP_X)
    height = PAD * 2 + (max((r for _, r in places.values()), default=0) + 1) * (NODE_H + GAP_Y)

    def box(job_id: int) -> tuple[float, float]:
        col, row = places[job_id]
        return PAD + col * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y)

    label = escape(f"workflow of {len(nodes)} jobs")
    parts = [
        f'<svg class="workflow" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="{label}"><title>{label}</title>'
    ]
    for edge in edges:
        if edge.job_id not in places or edge.parent_id not in places:
            continue
        x1, y1 = box(edge.parent_id)
        x2, y2 = box(edge.job_id)
        parts.append(
            f'<line x1="{x1 + NODE_W}" y1="{y1 + NODE_H / 2}" x2="{x2}"'
            f' y2="{y2 + NODE_H / 2}" class="edge {escape(edge.kind)}"/>'
        )
    for node in nodes:
        x, y = box(node.id)
        # a workflow's step by its name (its task on hover); a chain's job by its task
        text = escape(f"{node.id} {node.workflow_step or node.task}")
        title = escape(
            f"{node.id} {node.workflow_step} ({node.task})"
            if node.workflow_step
            else f"{node.id} {node.task}"
        )
        parts.append(
            f'<a href="{escape(base)}/jobs/{node.id}" id="node-{node.id}">'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6"'
            f' class="node {escape(node.state)}"><title>{title}: {escape(node.state)}'
            f'</title></rect><text x="{x + 8}" y="{y + 14}">{text}</text>'
            f'<text x="{x + 8}" y="{y + 28}" class="state">{escape(node.state)}</text>'
            "</a>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


#: Workflows a page of the list shows, and jobs counted at most per workflow.
LISTED = 50
COUNTED = 1000


@dataclass
class WorkflowRow:
    """One workflow of the list, with what :func:`progress_bar` draws."""

    id: int
    created_at: Any = None
    total: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0
    running: int = 0
    failed: int = 0
    pending: int = 0  # pending or waiting
    capped: bool = False


def workflows_page(request: Request) -> Response:
    """The newest workflows, each with its progress, 50 a page by keyset (``before=<id>``)."""
    before = inputs.positive(request.query_params, "before")
    with _read(request) as conn:
        rows = dependencies.list_workflows(conn, before, LISTED, COUNTED)
        now = database_now(conn)
    flows: dict[int, WorkflowRow] = {}
    for row in rows:
        flow = flows.setdefault(row.id, WorkflowRow(row.id, row.created_at))
        flow.created_at = min(flow.created_at, row.created_at)
        field = {"processing": "running", "waiting": "pending"}.get(row.state, row.state)
        setattr(flow, field, getattr(flow, field) + row.count)
        flow.total += row.count
        flow.capped = flow.total >= COUNTED
    listed = sorted(flows.values(), key=lambda flow: -flow.id)
    return render(
        request,
        "workflows.html",
        {
            "workflows": listed,
            "bar": progress_bar,
            "ago": ago,
            "exact": exact,
            "now": now,
            "older": listed[-1].id if len(listed) == LISTED else None,
        },
    )


def sequence_page(request: Request) -> Response:
    """A sequence's line: its live jobs (and a dead one that holds it) in enqueue order."""
    try:
        name = check_sequence(request.path_params["name"])
    except InvalidDependency as exc:
        raise inputs.BadInput(str(exc)) from None
    with _read(request) as conn:
        line = dependencies.sequence_line(conn, name, NODES + 1)
    return render(
        request, "sequence.html", {"name": name, "line": line[:NODES], "more": len(line) > NODES}
    )


def workflow_page(request: Request) -> Response:
    workflow_id = inputs.job_id(request.path_params["workflow_id"])
    with _read(request) as conn:
        nodes, edges = dependencies.workflow(conn, workflow_id, NODES + 1)
    if not nodes:
        raise UnknownJob(f"no workflow {workflow_id} (never enqueued, or pruned)")
    more = len(nodes) > NODES
    nodes = nodes[:NODES]
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.state] = counts.get(node.state, 0) + 1
    return render(
        request,
        "workflow.html",
        {
            "workflow_id": workflow_id,
            "graph": graph(nodes, edges, prefix(request)),
            "counts": sorted(counts.items()),
            "more": more,
            "nodes": nodes,
            "live": any(state in LIVE_STATES for state in counts),
        },
    )
