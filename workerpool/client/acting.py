"""Who an action is recorded as, in the audit trail and a cancel's request."""

from __future__ import annotations

from ..model.audit import check_actor, current_actor
from .engines import default_actor


def actor(by: str | None) -> str:
    """Who an action is recorded as: ``by``, else who :func:`~workerpool.model.audit.acting`
    named (the command line's user, the dashboard's), else ``user@host``."""
    if by is not None:
        return check_actor(by)
    return current_actor() or default_actor()
