"""A job's durable steps as ``workerpool status --job``, ``workerpool job show`` and its
dashboard page show them: each step's kind, status, attempt and value, as JSON and as a table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .status import short, table

#: A step's stored value is shown up to this many characters in a table.
STEP_VALUE_WIDTH = 60


def steps_json(
    steps: Mapping[str, Any] | None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """A job's durable steps in the order they started: name, kind (step, sleep, wait),
    status (done, sleeping, waiting, timed out), attempt, started_at, finished_at, value, and
    a wait's signal and deadline."""
    rows = [_step_json(name, entry, now) for name, entry in (steps or {}).items()]
    return sorted(rows, key=lambda row: (_moment(row["started_at"]), row["name"]))


def _step_json(name: str, entry: Mapping[str, Any], now: datetime | None) -> dict[str, Any]:
    kind, finished_at = entry.get("kind", "step"), entry.get("finished_at")
    if entry.get("timed_out"):
        status = "timed out"
    elif finished_at is None:
        status = "waiting"
    elif kind == "sleep" and now is not None and _moment(finished_at) > now:
        status = "sleeping"
    else:
        status = "done"
    row = {
        "name": name,
        "kind": kind,
        "status": status,
        "attempt": entry.get("attempt"),
        "started_at": entry.get("started_at"),
        "finished_at": finished_at,
        "value": entry.get("value"),
    }
    if kind == "wait":
        row.update(signal=entry.get("signal", name), deadline=entry.get("deadline"))
    return row


def _moment(text: str | None) -> datetime:
    return datetime.fromisoformat(text) if text else datetime.min.replace(tzinfo=UTC)


def render_steps(rows: list[Mapping[str, Any]]) -> str:
    """The STEPS table of one job."""
    return table(
        ["STEP", "KIND", "STATUS", "ATTEMPT", "STARTED", "FINISHED", "VALUE"],
        [
            [
                row["name"],
                row["kind"],
                row["status"],
                row["attempt"],
                short(row["started_at"]),
                short(row["finished_at"]),
                step_value(row),
            ]
            for row in rows
        ],
        empty="(no steps)",
    )


def step_value(row: Mapping[str, Any], width: int = STEP_VALUE_WIDTH) -> str:
    """A step's stored value as compact JSON, cut to ``width`` characters."""
    if row["status"] == "waiting":
        return f"waits for signal {row.get('signal')!r}"
    text = json.dumps(row["value"], separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
