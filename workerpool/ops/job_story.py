"""`workerpool job show ID`: a job's whole story: its state, attempts, each error with the
worker that hit it, its result, steps, logs, and its times (enqueued, started, finished, how
long it waited and ran), as text or as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ..model.errors import UnknownJob
from ..model.registry import Registry
from ..model.results import check_id
from ..model.typed import named_arguments
from ..sql import job_story
from . import job_view
from .job_steps import render_steps, steps_json
from .status import short, table

#: The characters of a payload or result shown in the text view (all of it in --json).
SHOWN = 400


def story(conn: Connection, job_id: int, registry: Registry | None = None) -> dict[str, Any]:
    """The job's story as JSON-ready data; UnknownJob when no job has this id. With the app's
    ``registry``, a typed task's payload is also shown as its arguments by name."""
    check_id(job_id)
    row = job_story.read(conn, job_id)
    if row is None:
        raise UnknownJob(f"no job {job_id} (never enqueued, or pruned after the retention)")
    return {
        "id": row.id,
        "queue": row.queue,
        "task": row.task,
        "state": row.state,
        "dead_reason": row.dead_reason,
        "attempts": row.attempts,
        "max_attempts": row.max_attempts,
        "key": row.key,
        "priority": row.priority,
        "batch_id": row.batch_id,
        "workflow_id": row.workflow_id,
        "tags": list(row.tags or []),
        "payload": row.payload,
        "arguments": arguments(registry, row.task, row.payload),
        "result": row.result,
        "progress": row.progress,
        "errors": [_error(entry) for entry in row.errors or []],
        "steps": steps_json(row.steps),
        "times": times(row),
        "logs": job_view.attempt_logs(conn, job_id),
    }


def arguments(registry: Registry | None, task: str, payload: Any) -> dict[str, Any] | None:
    """A typed task's payload by argument name (None: no registry, an unknown or dict task)."""
    spec = registry.tasks.get(task) if registry is not None else None
    return named_arguments(spec.signature, payload) if spec is not None else None


def _error(entry: Any) -> dict[str, Any]:
    entry = entry if isinstance(entry, dict) else {"message": str(entry)}
    return {
        "attempt": entry.get("attempt"),
        "at": entry.get("at"),
        "worker": entry.get("worker"),
        "type": entry.get("type"),
        "message": entry.get("message"),
        "traceback": entry.get("traceback"),
    }


def times(row: Any) -> dict[str, Any]:
    """Enqueued, started (the last attempt's claim), finished, next run, and the seconds it
    waited (enqueued to started) and ran (started to finished)."""
    started = row.started_at or row.claimed_at
    return {
        "enqueued": _iso(row.created_at),
        "started": _iso(started),
        "finished": _iso(row.finished_at),
        "next_run": _iso(row.run_at) if row.finished_at is None else None,
        "waited": _seconds(row.created_at, started),
        "ran": _seconds(started, row.finished_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max(0.0, (end - start).total_seconds()), 3)


def render(data: dict[str, Any]) -> str:
    """The story as text: a header, TIMES, ERRORS, RESULT, STEPS, then tags, progress, logs."""
    state = data["state"] + (f" ({data['dead_reason']})" if data["dead_reason"] else "")
    lines = [
        f"JOB {data['id']} {data['task']} on {data['queue']}: {state}, attempt "
        f"{data['attempts']} of {data['max_attempts']}"
    ]
    extras = [
        f"{name}={data[name]}"
        for name in ("key", "batch_id", "workflow_id", "priority")
        if data[name] not in (None, 0)
    ]
    if extras:
        lines.append("  " + " ".join(extras))
    lines += render_arguments(data["arguments"]) or ["PAYLOAD " + _short(data["payload"])]
    lines.append(
        "TIMES\n"
        + table(
            ["ENQUEUED", "STARTED", "FINISHED", "WAITED", "RAN"],
            [
                [
                    _when(data["times"]["enqueued"]),
                    _when(data["times"]["started"]),
                    _when(data["times"]["finished"]),
                    _took(data["times"]["waited"]),
                    _took(data["times"]["ran"]),
                ]
            ],
        ).rstrip()
    )
    if data["times"]["next_run"] and data["state"] != "running":
        lines.append(f"NEXT RUN {_when(data['times']['next_run'])}")
    if data["errors"]:
        lines.append(
            "ERRORS\n"
            + table(
                ["ATTEMPT", "AT", "WORKER", "ERROR"],
                [
                    [
                        e["attempt"],
                        _when(e["at"]),
                        e["worker"] or "-",
                        f"{e['type']}: {e['message']}" if e["type"] else e["message"],
                    ]
                    for e in data["errors"]
                ],
            ).rstrip()
        )
    if data["state"] == "done":
        lines.append("RESULT " + _short(data["result"]))
    if data["steps"]:
        lines.append("STEPS\n" + render_steps(data["steps"]).rstrip())
    extra = job_view.render_job(_Row(data), data["logs"])
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def render_arguments(shown: dict[str, Any] | None) -> list[str]:
    """``ARGUMENTS task(signature)`` then one ``name = value`` line per argument."""
    if not shown:
        return []
    lines = [f"ARGUMENTS {shown['signature']}"]
    for argument in shown["arguments"]:
        note = "" if argument["source"] == "given" else f"  ({argument['source']})"
        value = "-" if argument["source"] == "missing" else _short(argument["value"])
        lines.append(f"  {argument['name']} = {value}{note}")
    return lines


class _Row:
    """The tags and progress :func:`job_view.render_job` reads, from the story's data."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.tags, self.progress = data["tags"], data["progress"]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN else text[:SHOWN] + f"... ({len(text)} characters)"


def _when(moment: str | None) -> str:
    try:
        return short(moment) or "-"
    except (TypeError, ValueError):  # an entry written by hand: shown as it is
        return str(moment)


def _took(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}s"
