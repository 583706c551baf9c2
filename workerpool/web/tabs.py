"""The jobs list's state tabs and their counts, and how times are shown (relative, the exact
time on hover).

The tabs count what the list's filter matches. Filtered by queue alone (or not at all), the
counts are the overview's: exact on a small table, else the planner's (queue, state)
statistics (marked ``~``), plus the history's from its per-minute counts, so a tab costs no
read of the history however large it is. Filtered further, each tab counts its matches in both
tables, up to :data:`workerpool.sql.dashboard_reads.COUNT_CAP` (shown ``N+`` past it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import true

from .. import sql
from ..sql import dashboard_reads, status_counts
from ..sql.schema import STATES

#: Up to this many rows every state is counted exactly (as on the overview).
SMALL_TABLE = 20_000


@dataclass(frozen=True)
class Tab:
    state: str | None  # None: every state
    count: int
    estimated: bool
    capped: bool = False  # more than ``count`` match


def state_tabs(conn: Any, filters: dashboard_reads.JobFilter) -> list[Tab]:
    """ "all" and one tab per state, each with the count of what ``filters`` (its state aside)
    match in that state."""
    base = replace(filters, state=None, by_finished=False)
    if base.narrows:
        return [_counted(conn, base, state) for state in (None, *STATES)]
    queue = base.queue
    exact = dashboard_reads.count_capped(conn, true(), SMALL_TABLE) <= SMALL_TABLE
    by_state = dict.fromkeys(STATES, 0)
    if exact:
        for row in sql.state_counts(conn):
            if queue is None or row.queue == queue:
                by_state[row.state] += row.count
    else:
        for (row_queue, state), count in (status_counts.mcv_estimates(conn) or {}).items():
            if (queue is None or row_queue == queue) and state in by_state:
                by_state[state] += count
    for (row_queue, state), count in dashboard_reads.moved_counts(conn).items():
        if (queue is None or row_queue == queue) and state in by_state:
            by_state[state] += count
    tabs = [Tab(None, sum(by_state.values()), not exact)]
    return tabs + [Tab(state, by_state[state], not exact) for state in STATES]


def _counted(conn: Any, base: dashboard_reads.JobFilter, state: str | None) -> Tab:
    """One tab's matches, as that tab's list reads them (its dead rows by when they died)."""
    count = dashboard_reads.count_all(conn, replace(base, state=state, by_finished=state == "dead"))
    return Tab(
        state, min(count, dashboard_reads.COUNT_CAP), False, count > dashboard_reads.COUNT_CAP
    )


def ago(now: datetime, then: datetime | None) -> str:
    """``"2 min ago"``, ``"in 5 s"`` (a time to come), ``"3 d ago"``; "-" for none."""
    if then is None:
        return "-"
    seconds = (now - then).total_seconds()
    amount = abs(seconds)
    for limit, size, unit in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h")):
        if amount < limit:
            text = f"{amount / size:.0f} {unit}"
            break
    else:
        text = f"{amount / 86400:.0f} d"
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def exact(then: datetime | None) -> str:
    return then.isoformat(sep=" ", timespec="seconds") if then is not None else ""
