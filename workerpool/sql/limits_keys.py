"""Per-key limits in the claim: a key's headroom, the walk in claim order, and the key spread.

A row may start when its concurrency key has room (``headroom``: its task's limit minus the
key's running jobs, or its starts in the window) and it is among its key's first ``headroom``
due rows, so two rows of one key in one claim never both take its last slot.

The *walk* reads due rows in claim order, skipping those of full keys, but reads at most
``walk_rows`` of them: behind a backlog of one busy key (10,000 syncs of one account, limit 1)
a walk to the end would read the whole backlog on every claim. What the walk leaves unfilled,
the *spread* fills: it steps through the due rows' distinct keys in key order (one index probe
per key, from the worker's cursor onwards, so successive claims rotate through the keys) and
takes the first due row of each key that has room. Full keys are at most as many as the jobs
running, so the spread finds room after a bounded number of probes: a job is never held back
by other keys' jobs in front of it, only by its own key's limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    bindparam,
    case,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Integer, Text

from ..model.limits import KeyLimit
from ..model.states import DUE_STATES, JobState
from .planner import state_in
from .schema import jobs

#: Rows the walk reads per free slot of the claim (plus ``WALK_MIN``).
WALK_FACTOR = 10
WALK_MIN = 100

_PROCESSING = literal_column(f"'{JobState.PROCESSING}'")  # the partial indexes' literal
#: See limits_claim: the start of the statement, after the queue lock was granted.
NOW = func.statement_timestamp()
#: Where the worker's spread resumes (the greatest key its previous claim took; "" at first).
KEY_CURSOR = bindparam("key_cursor", "", type_=Text)


def seconds(value: float) -> Any:
    return literal_column(f"interval '{int(value)} seconds'")  # a window of limits.WINDOWS


def count_upto(
    bound: int, where: Callable[[Any], tuple], order: Callable[[Any], tuple] = lambda held: ()
) -> Any:
    """``count(*)`` of the rows matching ``where(held)``, read no further than ``bound``: a
    limit only needs to know whether it is reached.

    ``order(held)``: the columns of the one index that should serve the count. Where two
    partial indexes match, stale statistics (a table analyzed before its backlog arrived)
    make them tie, and the per-key probe could then take ``ix_workerpool_jobs_leased`` and
    read every running row of the queue for each candidate: 150 x 49 us per claim instead of
    150 x 2 us. With sorts priced out, the index in that order is the only cheap path.
    """
    held = jobs.alias("held")
    rows = (
        select(literal_column("1"))
        .select_from(held)
        .where(*where(held))
        .order_by(*order(held))
        .limit(bound)
        .correlate_except(held)
    )  # the candidate row is the outer query's
    return select(func.count()).select_from(rows.subquery()).scalar_subquery()


def headroom(queue: str, keys: tuple[KeyLimit, ...], row: Any = jobs) -> Any:
    """How many more jobs ``row``'s key may start now (NULL: its task has no per-key limit)."""
    parts = []
    concurrency = {k.task: k.concurrency for k in keys if k.concurrency}
    if concurrency:
        running = count_upto(
            max(concurrency.values()),
            lambda held: (
                held.c.queue == queue,
                *_same_key(held, row),
                held.c.state == _PROCESSING,
            ),
            lambda held: (held.c.concurrency_key,),
        )
        parts.append(case(concurrency, value=row.c.task) - running)
    rates = {k.task: k.rate for k in keys if k.rate}
    if rates:
        window = case({task: rate.window for task, rate in rates.items()}, value=row.c.task)
        started = count_upto(
            max(rate.count for rate in rates.values()),
            lambda held: (
                held.c.queue == queue,
                *_same_key(held, row),
                held.c.started_at > NOW - window * seconds(1),
            ),
            lambda held: (held.c.concurrency_key, held.c.started_at),
        )
        parts.append(
            case({task: rate.count for task, rate in rates.items()}, value=row.c.task) - started
        )
    return parts[0] if len(parts) == 1 else func.least(*parts)


def _same_key(held: Any, row: Any) -> tuple[Any, Any]:
    """``held``'s key is ``row``'s, written as a range: an equality would make the planner
    drop the key from the probe's ORDER BY, and the order is what leaves the key index as the
    probe's only cheap path (see ``count_upto``)."""
    return (
        held.c.concurrency_key >= row.c.concurrency_key,
        held.c.concurrency_key <= row.c.concurrency_key,
    )


def walk(
    name: str, where: list[Any], take: int, walk_rows: int, keys: tuple[KeyLimit, ...], queue: str
) -> Any:
    """Up to ``take`` due rows in claim order that fit their key, of the first ``walk_rows``.

    The walk reads rows in claim order from the first, so when a key has no more rows among
    the ``take`` candidates than its headroom, they are its first rows this worker may run and
    all fit: counted per key in a hash (no sort: the worker's planner settings price sorts
    out). Only a key with more candidates than room probes for its first ``headroom`` due rows.
    """
    rows = (
        select(jobs.c.id, jobs.c.concurrency_key, headroom(queue, keys).label("headroom"))
        .where(*where)
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(walk_rows)
        .subquery(f"{name}_walk")
    )  # headroom counted once per row
    free = or_(rows.c.concurrency_key.is_(None), rows.c.headroom.is_(None))
    candidates = (
        select(rows).where(or_(free, rows.c.headroom > 0)).limit(take).cte(f"{name}_candidates")
    )
    per_key = (
        select(candidates.c.concurrency_key, func.count().label("n"))
        .where(candidates.c.concurrency_key.isnot(None))
        .group_by(candidates.c.concurrency_key)
        .subquery(f"{name}_per_key")
    )
    # the counts as one jsonb object, built once and looked up per row: a join of the
    # candidates to their counts was planned, on statistics that saw no candidates, as a
    # nested loop that rescans the counts per row (1.1 ms a claim of 130 instead of 0.1)
    counts = select(
        func.jsonb_object_agg(per_key.c.concurrency_key, per_key.c.n, type_=JSONB)
    ).scalar_subquery()
    fits = or_(
        candidates.c.concurrency_key.is_(None),
        candidates.c.headroom.is_(None),
        counts[candidates.c.concurrency_key].astext.cast(Integer) <= candidates.c.headroom,
        candidates.c.id.in_(_first_of_its_key(queue, candidates)),
    )
    return select(candidates.c.id, candidates.c.concurrency_key).where(fits).cte(name)


def _first_of_its_key(queue: str, row: Any) -> Any:
    """The first ``headroom`` due rows of ``row``'s key, in claim order."""
    ahead = jobs.alias("ahead")
    return (
        select(ahead.c.id)
        .where(
            ahead.c.queue == queue,
            ahead.c.concurrency_key == row.c.concurrency_key,
            state_in(*DUE_STATES, table=ahead),
            ahead.c.run_at <= func.now(),
        )
        .order_by(ahead.c.priority.desc(), ahead.c.run_at, ahead.c.id)
        .limit(row.c.headroom)
        .correlate_except(ahead)
    )


def spread(
    queue: str,
    runnable: Callable[[Any], list[Any]],
    keys: tuple[KeyLimit, ...],
    walked: Any,
    room: Any,
) -> Any:
    """The first due row of each key with room, keys in order from the cursor, rows the walk
    did not take, as many as the walk left of ``room`` (none: the spread reads nothing)."""
    step = _next_key_after(queue)
    found = select(step(KEY_CURSOR).label("key")).cte("key_step", recursive=True)
    found = found.union_all(select(step(found.c.key)).where(found.c.key.isnot(None)))
    first = jobs.alias("key_first")
    row = (
        select(first.c.id, first.c.concurrency_key, headroom(queue, keys, first).label("headroom"))
        .where(first.c.queue == queue, first.c.concurrency_key == found.c.key, *runnable(first))
        .order_by(first.c.priority.desc(), first.c.run_at, first.c.id)
        .limit(1)
        .lateral("key_first_row")
    )
    left = room - select(func.count()).select_from(walked).scalar_subquery()
    return (
        select(row.c.id, row.c.concurrency_key)
        .select_from(found.join(row, true()))
        .where(found.c.key.isnot(None), row.c.headroom > 0, row.c.id.not_in(select(walked.c.id)))
        .limit(left)
        .cte("spread")
    )


def _next_key_after(queue: str) -> Callable[[Any], Any]:
    """The smallest key of a due row above ``after`` (one probe of ix_workerpool_jobs_due_key)."""
    probe = jobs.alias("key_probe")

    def step(after: Any) -> Any:
        return (
            select(probe.c.concurrency_key)
            .where(
                probe.c.queue == queue,
                state_in(*DUE_STATES, table=probe),
                probe.c.concurrency_key > after,
            )
            .order_by(probe.c.concurrency_key)
            .limit(1)
            .correlate_except(probe)
            .scalar_subquery()
        )

    return step
