"""Counts of what one worker process did, for tests and diagnostics (kept in memory only)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counters:
    claimed: int = 0
    finished: int = 0
    lost: int = 0
    released: int = 0
    unstarted: int = 0  # prefetched jobs given back without running
    timeouts: int = 0
    db_errors: int = 0
    states: dict[str, int] = field(default_factory=dict)  # new job state -> outcomes written
