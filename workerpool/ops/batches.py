"""Batches for people and scripts: ``workerpool batch show ID``, the open batches in
``workerpool status``, and the progress bar both draw (the dashboard draws its own in HTML).

Every read is bounded: one batch's counts (an index range of its own members), and at most
:data:`OPEN_SHOWN` open batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from ..model.batch import BatchStatus, status_of
from ..sql import batches

#: Open batches ``workerpool status`` lists (the oldest first); the count covers them all.
OPEN_SHOWN = 10
BAR_WIDTH = 30


def open_batches(conn: Connection, limit: int = OPEN_SHOWN) -> dict[str, Any]:
    """``{"open": how many, "oldest": [status JSON of the oldest few]}``."""
    rows = batches.open_batches(conn, limit)
    shown = [status_of(row, batches.member_counts(conn, row.id)).as_dict() for row in rows]
    total = len(rows) if len(rows) < limit else batches.count_open(conn)
    return {"open": total, "oldest": shown}


def show(conn: Connection, status: BatchStatus) -> dict[str, Any]:
    """One batch as ``workerpool batch show --json`` prints it."""
    data = status.as_dict()
    states = batches.callback_states(conn, status.callback_ids)
    data["callbacks"] = [
        {"id": job_id, "state": states.get(job_id, "pruned")} for job_id in status.callback_ids
    ]
    return data


def bar(done: int, settled: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[####===.....]``: ``#`` done, ``=`` ended otherwise (dead, cancelled), ``.`` live."""
    if total <= 0:
        return "[" + " " * width + "]"
    ok = round(width * done / total)
    ended = max(0, round(width * settled / total) - ok)
    return "[" + "#" * ok + "=" * ended + "." * (width - ok - ended) + "]"


def render(data: Mapping[str, Any]) -> str:
    """A batch (the JSON of :func:`show`) as lines for people."""
    total, done = data["total"], data["done"]
    settled = done + data["dead"] + data["cancelled"]
    head = f"batch {data['id']}" + (f" (key {data['key']})" if data["key"] else "")
    if data["finished"]:
        state = (
            f"finished {data['finished_at'][:19].replace('T', ' ')}, {data['outcome']}"
            f" (fired by {data['fired_by']})"
        )
    else:
        state = "open"
    share = f"{100 * settled // total}%" if total else "-"
    lines = [
        f"{head}: {state}; opened {data['created_at'][:19].replace('T', ' ')}",
        f"  members {total}  {bar(done, settled, total)} {share} ended",
        f"  done {done} · running {data['running']} · pending {data['pending']}"
        f" · retrying {data['failed']} · dead {data['dead']} · cancelled {data['cancelled']}",
        "  callbacks: "
        + (
            ", ".join(
                f"on_{on}={data[f'on_{on}']}"
                for on in ("complete", "success", "failure")
                if data[f"on_{on}"]
            )
            or "none"
        ),
    ]
    if data.get("callbacks"):
        lines.append(
            "  callback jobs: " + ", ".join(f"{c['id']} ({c['state']})" for c in data["callbacks"])
        )
    return "\n".join(lines) + "\n"


def render_open(section: Mapping[str, Any]) -> str:
    """The OPEN BATCHES part of ``workerpool status`` (empty when none is open)."""
    if not section or not section["open"]:
        return ""
    lines = [f"OPEN BATCHES ({section['open']})"]
    for data in section["oldest"]:
        total, done = data["total"], data["done"]
        settled = done + data["dead"] + data["cancelled"]
        lines.append(
            f"  {data['id']:<8} {bar(done, settled, total, 20)} {settled}/{total} ended"
            f"  (dead {data['dead']}, cancelled {data['cancelled']},"
            f" running {data['running']})" + (f"  key {data['key']}" if data["key"] else "")
        )
    if section["open"] > len(section["oldest"]):
        lines.append(f"  ... and {section['open'] - len(section['oldest'])} more")
    return "\n".join(lines)


__all__ = ["bar", "open_batches", "render", "render_open", "show"]
