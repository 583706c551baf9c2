"""A job that ended runs again, from a named step: ``pool.rerun(job_id, from_step=None)``.

Which steps a rerun keeps is decided here, from the job's stored steps alone: the steps the
handler recorded before ``from_step`` (in the order it ran them: each step's start, on the
database clock), never that step or any later one. ``None`` keeps none: the handler runs from
its first line as if new. A step the job never recorded is refused, naming the ones it did.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

from .errors import JobLive, UnknownStep
from .states import FINAL_STATES
from .steps import check_name


class Kept(NamedTuple):
    """The steps a rerun keeps (name → entry) and the names it drops, in run order."""

    steps: dict[str, Any] | None
    dropped: list[str]


def in_run_order(steps: dict[str, Any] | None) -> list[str]:
    """The names of ``steps`` in the order the handler ran them (a JSON object keeps no order:
    each entry's start does; compared as instants, whatever UTC offset wrote them)."""
    entries = steps or {}
    return sorted(
        entries,
        key=lambda name: (
            _instant(entries[name].get("started_at")),
            _instant(entries[name].get("finished_at")),
            name,
        ),
    )


def _instant(text: Any) -> datetime:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else _NEVER
    except ValueError:
        return _NEVER


_NEVER = datetime.max.replace(tzinfo=UTC)  # an entry without a time sorts last


def check_rerun(job_id: int, state: str) -> None:
    """Only a job that ended runs again."""
    if state not in FINAL_STATES:
        raise JobLive(
            f"job {job_id} is {state}: only a done, dead or cancelled job is rerun; nothing changed"
        )


def kept_steps(job_id: int, steps: dict[str, Any] | None, from_step: str | None) -> Kept:
    """What a rerun from ``from_step`` keeps of ``steps``."""
    order = in_run_order(steps)
    if from_step is None:
        return Kept(None, order)
    check_name(from_step)
    if from_step not in order:
        recorded = ", ".join(repr(name) for name in order) or "none"
        raise UnknownStep(
            f"job {job_id} recorded no step {from_step!r} (its steps: {recorded}); nothing changed"
        )
    cut = order.index(from_step)
    kept = {name: (steps or {})[name] for name in order[:cut]}
    return Kept(kept or None, order[cut:])


__all__ = ["Kept", "check_rerun", "in_run_order", "kept_steps"]
