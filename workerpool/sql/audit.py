"""The audit trail (``workerpool_audit``): one row per operator action, written by the
operation itself inside its own transaction, so an action and its record commit together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select, text

from ..model.audit import current_source
from .schema import audit

#: Job ids an entry's detail lists at most (a queue-wide cancel can select millions; the count
#: is whole).
AUDIT_IDS = 1000


# record: one action, in the caller's transaction. Index: pk_workerpool_audit.
def record(
    conn: Connection, actor: str, action: str, target: str, detail: Mapping[str, Any] | None = None
) -> None:
    """``actor`` did ``action`` to ``target``; the source is the one :func:`acting` set."""
    conn.execute(
        audit.insert().values(
            actor=actor,
            source=current_source(),
            action=action,
            target=target,
            detail=dict(detail or {}),
        )
    )


# list_entries: newest first, by keyset on id. Index: pk_workerpool_audit (backward scan).
def list_entries(
    conn: Connection,
    *,
    actor: str | None = None,
    action: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[Any]:
    stmt = select(audit).order_by(audit.c.id.desc()).limit(limit)
    if actor is not None:
        stmt = stmt.where(audit.c.actor == actor)
    if action is not None:
        stmt = stmt.where(audit.c.action == action)
    if before is not None:
        stmt = stmt.where(audit.c.id < before)
    return list(conn.execute(stmt))


# prune_audit: delete up to ``limit`` entries older than the retention (an hour at the least),
# through the owner's function (migration 0017): the trail is append-only to the worker role.
# Index: ix_workerpool_audit_at.
_PRUNE = text("SELECT workerpool_prune_audit(:older, :limit)")


def prune_audit(conn: Connection, older_than: float, limit: int) -> int:
    return int(conn.execute(_PRUNE, {"older": float(older_than), "limit": limit}).scalar_one())
