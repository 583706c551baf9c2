"""What holds a waiting job back: the limits part of ``workerpool status`` and a job's "why".

The limits come from the queue's row, where its workers published what they enforce, so the
status needs only the database, like the rest of ``workerpool status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from ..model.errors import UnknownJob
from ..model.limits import parse_rate
from ..sql import limit_holds


def collect(conn: Connection, published: Mapping[str, Any]) -> dict[str, Any]:
    """queue → each limit, what uses it and what it holds back (queues with limits only)."""
    return {queue: limit_holds.queue_usage(conn, queue, limits)
            for queue, limits in sorted(published.items()) if limits}


def why_waiting(conn: Connection, job_id: int, published: Mapping[str, Any]) -> str:
    """One line: the limit that holds the job, or why it is not waiting on a limit."""
    row = limit_holds.job(conn, job_id)
    if row is None:
        raise UnknownJob(f"no job has id {job_id}")
    if not row.due:
        return f"job {job_id} ({row.task}): {row.state}, not due: no limit holds it"
    held = _hold(conn, row, published)
    if held is None:
        return f"job {job_id} ({row.task}): due, no limit holds it (waiting for a free worker)"
    return f"job {job_id} ({row.task}): held by {held}"


def holding_limit(conn: Connection, job_id: int, published: Mapping[str, Any]) -> str | None:
    """The limit that holds this due job back now (as a phrase), or None."""
    row = limit_holds.job(conn, job_id)
    return _hold(conn, row, published) if row is not None and row.due else None


def _hold(conn: Connection, row: Any, published: Mapping[str, Any]) -> str | None:
    limits = published.get(row.queue) or {}
    return _queue_hold(conn, row.queue, limits) or _key_hold(conn, row, limits)


def _queue_hold(conn: Connection, queue: str, limits: Mapping[str, Any]) -> str | None:
    usage = limit_holds.queue_usage(conn, queue, {**limits, "tasks": {}})
    cap = usage["global_concurrency"]
    if cap and cap["running"] >= cap["limit"]:
        return f"global_concurrency of queue {queue} ({cap['running']} of {cap['limit']} running)"
    rate = usage["rate_limit"]
    if rate and rate["held"]:
        return f"rate_limit {rate['limit']} of queue {queue} ({rate['started']} started)"
    return None


def _key_hold(conn: Connection, row: Any, limits: Mapping[str, Any]) -> str | None:
    task = (limits.get("tasks") or {}).get(row.task)
    if not task or row.concurrency_key is None:
        return None
    rate = parse_rate("key_rate_limit", task["key_rate_limit"]) if task.get(
        "key_rate_limit") else None
    used = limit_holds.key_usage(conn, row.queue, row.concurrency_key,
                                 rate.window if rate else 1.0)
    cap = task.get("concurrency_limit")
    if cap and used.running >= cap:
        return (f"concurrency_limit of key {row.concurrency_key!r} ({used.running} of {cap}"
                " running)")
    if rate and used.started >= rate.count:
        return (f"key_rate_limit {rate} of key {row.concurrency_key!r} ({used.started}"
                " started)")
    return None


def render(limits: Mapping[str, Any]) -> str:
    """The LIMITS table: one row per limit of each limited queue."""
    from .status import table

    rows = []
    for queue, usage in limits.items():
        if usage["global_concurrency"]:
            cap = usage["global_concurrency"]
            rows.append([queue, "global_concurrency", cap["limit"], f"{cap['running']} running",
                         cap["held"]])
        if usage["rate_limit"]:
            rate = usage["rate_limit"]
            rows.append([queue, "rate_limit", rate["limit"], f"{rate['started']} started",
                         rate["held"]])
        for task, held in usage["tasks"].items():
            if held.get("concurrency_limit"):
                rows.append([queue, f"concurrency_limit ({task}, per key)",
                             held["concurrency_limit"], "-", held["held_by_concurrency_limit"]])
            if held.get("key_rate_limit"):
                rows.append([queue, f"key_rate_limit ({task}, per key)", held["key_rate_limit"],
                             "-", held["held_by_key_rate_limit"]])
    if not rows:
        return ""
    return "LIMITS\n" + table(["QUEUE", "LIMIT", "SETTING", "IN USE", "HOLDING"], rows)
