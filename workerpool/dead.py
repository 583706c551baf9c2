"""The dead-letter queue from Python, at the path docs/operations.md gives it
(``from workerpool import dead``; ``dead.list_dead``, ``dead.retry``, ``dead.purge``).

The operations live in :mod:`workerpool.ops.dead`.
"""

from __future__ import annotations

from .ops.dead import (
    DeadFilter,
    DeadPage,
    DeadRow,
    PurgeResult,
    ReplayResult,
    list_dead,
    parse_duration,
    parse_since,
    purge,
    retry,
)

__all__ = [
    "DeadFilter",
    "DeadPage",
    "DeadRow",
    "PurgeResult",
    "ReplayResult",
    "list_dead",
    "parse_duration",
    "parse_since",
    "purge",
    "retry",
]
