"""A queue-wide rate limit's count: claims per slice of the window, in a ring of small rows.

The window is cut into ``RATE_SLICES`` slices; ``workerpool_rate_counts`` holds one row per
slice, in ``RATE_SLICES + 1`` slots per (queue, window), a slot taken over by the slice that
comes ``RATE_SLICES + 1`` slices after it. A claim sums the current slice and the
``RATE_SLICES`` before it (a span from one window to one window and a slice long, which
contains the last window whatever the moment), and adds what it claims to the current slice.
So no window ever holds more than the limit's claims, and a limit that binds runs at worst at
``RATE_SLICES / (RATE_SLICES + 1)`` of it. The sum reads at most ``RATE_SLICES + 1`` rows,
whatever the rate.

Only claims write here, and only to add: a crash, a lease lost or a cancel changes nothing (a
start stays a start), and a slot never read again is simply overwritten later, so the count
cannot drift. Two claims adding to one slice queue up on its row for the rest of their
transactions; those that count (under the queue's exclusive lock) already take turns. The slots
of a window no claim uses any more (a limit removed or changed, a queue gone) are deleted by
the maintenance child (``prune``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, case, delete, extract, func, literal, literal_column, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.types import BigInteger, Integer, SmallInteger

from ..model.limits import Rate
from .schema import RATE_SLICES, rate_counts

#: The statement's own clock, as every limit count of the claim uses (see limits_keys.NOW).
_EPOCH = "extract(epoch FROM statement_timestamp())"


def _slice(rate: Rate) -> Any:
    """The current slice of ``rate``'s window (constants only: the plan stays generic)."""
    return literal_column(
        f"floor({_EPOCH} * {RATE_SLICES} / {int(rate.window)})::bigint", BigInteger
    )


def claimed(queue: str, rate: Rate) -> Any:
    """Claims of ``queue`` in the current slice and the ``RATE_SLICES`` before it.
    Index: pk_workerpool_rate_counts."""
    return (
        select(func.coalesce(func.sum(rate_counts.c.claims), 0))
        .where(
            rate_counts.c.queue == queue,
            rate_counts.c.window_s == int(rate.window),
            rate_counts.c.slice >= _slice(rate) - RATE_SLICES,
        )
        .scalar_subquery()
    )


def add(queue: str, rate: Rate, rows: Any) -> Any:
    """Add the count of ``rows`` (the claim's RETURNING, as a CTE) to the current slice: an
    upsert of its slot that starts the slot afresh when it still holds an older slice (and
    keeps a newer one: a claim that waited past its slice's turn adds nothing to it).
    Index: pk_workerpool_rate_counts."""
    now = _slice(rate)
    source = (
        select(
            literal(queue),
            literal(int(rate.window), Integer),
            (now % (RATE_SLICES + 1)).cast(SmallInteger),
            now,
            func.count().cast(Integer),
        )
        .select_from(rows)
        .having(func.count() > 0)
    )
    stmt = insert(rate_counts).from_select(["queue", "window_s", "slot", "slice", "claims"], source)
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[rate_counts.c.queue, rate_counts.c.window_s, rate_counts.c.slot],
        set_={
            "claims": case(
                (rate_counts.c.slice == new.slice, rate_counts.c.claims + new.claims),
                (rate_counts.c.slice > new.slice, rate_counts.c.claims),
                else_=new.claims,
            ),
            "slice": func.greatest(rate_counts.c.slice, new.slice),
        },
    )


#: How long after its window a slice is kept: past any claim statement still running (the
#: worker's statement timeout is 15 s), so a prune never takes a slice a claim still counts.
PRUNE_AFTER = 60


# prune_rate_counts: delete the slots whose slice left every window a claim can still count.
# Index: none (a scan of a table of a few rows per limited queue).
def prune(conn: Connection) -> int:
    """Delete ring slots no claim counts any more; returns how many. A slot still in use is
    rewritten within its window, so only abandoned windows lose rows."""
    ended = (rate_counts.c.slice + 1) * rate_counts.c.window_s / RATE_SLICES
    stale = ended < extract("epoch", func.now()) - rate_counts.c.window_s - PRUNE_AFTER
    return conn.execute(delete(rate_counts).where(stale)).rowcount
