"""One job's tags, progress and attempt logs, as ``workerpool status --job`` and the
dashboard's job page show them; and ``workerpool status --tag``'s counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from ..sql.job_logs import job_logs_of
from ..sql.tags import tag_counts


def progress_text(progress: Mapping[str, Any] | None) -> str | None:
    """``40% (attempt 2, at ...)`` or the reported object as compact JSON."""
    if not progress:
        return None
    value = progress.get("value")
    shown = f"{value * 100:.0f}%" if isinstance(value, int | float) else _compact(value)
    return f"{shown} (attempt {progress.get('attempt')}, at {progress.get('at')})"


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def attempt_logs(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    """Each attempt's captured records, oldest attempt first: attempt, written_at, records,
    dropped (records the bound left out)."""
    return [
        {
            "attempt": row.attempt,
            "written_at": row.written_at.isoformat(),
            "records": row.records,
            "dropped": row.dropped,
        }
        for row in job_logs_of(conn, job_id)
    ]


def job_json(row: Any, logs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tags": list(row.tags or []), "progress": row.progress, "logs": logs}


def render_job(row: Any, logs: list[dict[str, Any]]) -> str:
    """The TAGS, PROGRESS and LOGS lines under ``status --job``'s answer."""
    lines = []
    if row.tags:
        lines.append("TAGS " + ", ".join(row.tags))
    shown = progress_text(row.progress)
    if shown:
        lines.append("PROGRESS " + shown)
    for attempt in logs:
        lines.append(f"LOGS of attempt {attempt['attempt']} (written {attempt['written_at']})")
        lines += [
            f"  {r['at']} {r['level']} {r['logger']}: {r['message']}" for r in attempt["records"]
        ]
        if attempt["dropped"]:
            lines.append(f"  ... truncated: {attempt['dropped']} more record(s) not kept")
    return "\n".join(lines)


def tagged(conn: Connection, tags: Sequence[str]) -> dict[str, Any]:
    """``workerpool status --tag``: the jobs carrying every tag, counted by queue and state."""
    rows, capped = tag_counts(conn, tags)
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row.queue, {})[row.state] = row.count
    return {"tags": list(tags), "queues": counts, "lower_bound": capped}


def render_tagged(data: Mapping[str, Any]) -> str:
    from .status import table

    rows = [
        [queue, state, count]
        for queue, states in data["queues"].items()
        for state, count in states.items()
    ]
    note = "\n  (a lower bound: more rows match than were counted)" if data["lower_bound"] else ""
    return (
        f"JOBS TAGGED {' + '.join(data['tags'])}\n"
        + table(["QUEUE", "STATE", "JOBS"], rows, empty="(no job carries these tags)")
        + note
        + "\n"
    )
