"""Reading the dashboard's query strings and forms: every value checked, or one readable line.

Empty fields mean "no filter" (an HTML form sends every field, filled or not). A bad value
raises :class:`BadInput`, which the app answers with 400 and the message, before anything is
read or written.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ..model.errors import InvalidFilter
from ..model.validation import check_name, check_tag_filter
from ..ops.dead import DeadFilter, parse_duration, parse_since
from ..sql.dashboard_reads import JobFilter
from ..sql.schema import DEAD_REASONS, STATES
from . import query

#: The jobs list's filter fields (what an action on every match sends again).
LIST_FIELDS = (
    "q",
    "queue",
    "task",
    "state",
    "reason",
    "key",
    "tag",
    "since",
    "until",
    "batch",
    "workflow",
)
#: The dead-letter list's filters, all of which its bulk retry and purge forms send again.
DEAD_FILTERS = ("queue", "task", "reason", "key", "tag", "since")
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_KEY = 1000
#: The largest id or cursor a bigint column holds.
MAX_ID = 2**63 - 1


class BadInput(ValueError):
    """A query parameter or form field the dashboard cannot use."""


def text(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name} must be text")
    if "\x00" in value:  # no name, key or filter holds one; PostgreSQL refuses it as text
        raise BadInput(f"{name} must not contain a NUL character")
    value = value.strip()
    return value or None


def name(params: Mapping[str, Any], kind: str) -> str | None:
    value = text(params, kind)
    if value is not None:
        try:
            check_name(kind, value)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    return value


def choice(params: Mapping[str, Any], field: str, allowed: tuple[str, ...]) -> str | None:
    value = text(params, field)
    if value is not None and value not in allowed:
        raise BadInput(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def positive(
    params: Mapping[str, Any], field: str, default: int | None = None, maximum: int = MAX_ID
) -> int | None:
    value = text(params, field)
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"{field} must be a positive whole number; got {value!r}")
    if int(value) > maximum:
        raise BadInput(f"{field} must be at most {maximum}; got {value}")
    return int(value)


def moment(params: Mapping[str, Any], field: str) -> datetime | timedelta | None:
    """A duration back from now (``2h``) or an ISO time with its offset."""
    value = text(params, field)
    if value is None:
        return None
    try:
        return parse_since(value)
    except InvalidFilter:
        raise BadInput(
            f"{field} must be a duration back from now (15m, 2h, 7d) or an ISO time"
            f" with its offset; got {value!r}"
        ) from None


def key(params: Mapping[str, Any]) -> str | None:
    value = text(params, "key")
    if value is not None and len(value) > MAX_KEY:
        raise BadInput(f"key must be at most {MAX_KEY} characters")
    return value


def job_filter(params: Mapping[str, Any]) -> JobFilter:
    """The jobs list's filters; on dead rows the time range is when they died (as the
    dead-letter operations read ``since``), elsewhere when they were created. The query box
    (``q``, :mod:`workerpool.web.query`) sets what the fields leave empty."""
    fields, payload = query.parse(text(params, "q") or "")
    params = {**fields, **{k: v for k, v in params.items() if text(params, k) is not None}}
    state = choice(params, "state", STATES)
    return JobFilter(
        queue=name(params, "queue"),
        task=name(params, "task"),
        state=state,
        dead_reason=choice(params, "reason", DEAD_REASONS),
        key=key(params),
        created_after=moment(params, "since"),
        created_before=moment(params, "until"),
        by_finished=state == "dead",
        tags=tag(params),
        payload=payload,
        batch_id=positive(params, "batch"),
        workflow_id=positive(params, "workflow"),
    )


def tag(params: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The ``tag`` filter (one tag; empty: none)."""
    value = params.get("tag")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return check_tag_filter([value])
    except InvalidFilter as exc:
        raise BadInput(str(exc)) from None


def search(params: Mapping[str, Any]) -> tuple[int | None, str]:
    """The header's search box: ``(job id, "")`` for digits, else ``(None, key)``."""
    value = text(params, "q")
    if value is None:
        raise BadInput("search for a job id or a key: the box was empty")
    if len(value) > MAX_KEY:
        raise BadInput(f"a key has at most {MAX_KEY} characters")
    if value.isdigit():
        return job_id(value), ""
    return None, value


def ids(values: list[str]) -> list[int]:
    """The checked boxes of the jobs list (``id`` fields)."""
    if not values:
        raise BadInput("no job selected: tick the jobs to act on")
    return [job_id(value.strip()) for value in values]


def dead_filter(params: Mapping[str, Any]) -> DeadFilter:
    """The dead-letter filters of the retry and purge forms: every filter of the dead-letter
    list (:data:`DEAD_FILTERS`), so a bulk action covers exactly the rows the list shows."""
    try:
        return DeadFilter(
            queue=name(params, "queue"),
            task=name(params, "task"),
            reason=choice(params, "reason", DEAD_REASONS),
            since=moment(params, "since"),
            tags=tag(params),
            key=key(params),
        )
    except InvalidFilter as exc:
        raise BadInput(str(exc)) from None


def duration(params: Mapping[str, Any], field: str) -> timedelta:
    value = text(params, field)
    if value is None:
        raise BadInput(f"{field} is required (e.g. 30d, 12h)")
    try:
        return parse_duration(value)
    except InvalidFilter as exc:
        raise BadInput(str(exc)) from None


def job_id(raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise BadInput(f"a job id is a positive whole number; got {raw!r}")
    return int(raw)


def flag(params: Mapping[str, Any], field: str) -> bool:
    return text(params, field) in ("1", "true", "on", "yes")
