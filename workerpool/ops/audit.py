"""The audit trail as an operator reads it: newest first, filtered by actor or action, a page
at a time (``workerpool audit``, the dashboard's /audit page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..client import WorkerPool
from ..model.errors import InvalidFilter
from ..sql import audit

#: The actions operations record (``action`` of an entry).
ACTIONS = (
    "cancel",
    "retry",
    "purge",
    "run_now",
    "signal",
    "pause",
    "resume",
    "cron_pause",
    "cron_resume",
    "cron_run",
    "cron_add",
    "cron_remove",
    "rerun",
)
MAX_LIMIT = 500


@dataclass(frozen=True)
class Entry:
    id: int
    at: datetime
    actor: str
    source: str
    action: str
    target: str
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "at": self.at.isoformat()}


@dataclass(frozen=True)
class AuditPage:
    entries: list[Entry]
    before: int | None  # pass as ``before`` for the next (older) page; None: no more


def list_audit(
    pool: WorkerPool,
    *,
    actor: str | None = None,
    action: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> AuditPage:
    """Entries newest first. InvalidFilter for an unknown action, a bad cursor or limit."""
    _check(actor, action, before, limit)
    with pool.engine.connect() as conn:
        rows = audit.list_entries(conn, actor=actor, action=action, before=before, limit=limit + 1)
    entries = [
        Entry(r.id, r.at, r.actor, r.source, r.action, r.target, r.detail) for r in rows[:limit]
    ]
    return AuditPage(entries, entries[-1].id if len(rows) > limit else None)


def _check(actor: Any, action: Any, before: Any, limit: Any) -> None:
    if actor is not None and (not isinstance(actor, str) or not actor or len(actor) > 200):
        raise InvalidFilter(f"actor must be 1 to 200 characters, got {actor!r}")
    if action is not None and action not in ACTIONS:
        raise InvalidFilter(f"action must be one of {', '.join(ACTIONS)}; got {action!r}")
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or before < 1
    ):
        raise InvalidFilter(f"before must be a positive entry id, got {before!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilter(f"limit must be an int within 1..{MAX_LIMIT}, got {limit!r}")
